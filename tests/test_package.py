"""Release metadata (issue 21, item 7): one version, and every non-Python file of the package ships in the wheel.

The full check (build the wheel and sdist, install in a fresh venv, run `interp scan tiny-llama`) is
`.ci/package_smoke.sh`, run by `.ci/run`; it needs minutes and PyPI, so it is not a unit test.
"""

import fnmatch
import importlib.metadata
import tomllib
from pathlib import Path

import interp

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_version_comes_from_the_package_metadata():
    assert interp.__version__ == importlib.metadata.version("interp")


def test_every_data_file_is_declared_package_data():
    declared = PYPROJECT["tool"]["setuptools"]["package-data"]
    data = [p for p in (ROOT / "interp").rglob("*")
            if p.is_file() and p.suffix not in {".py", ".pyc"} and "__pycache__" not in p.parts]
    assert data, "expected at least the fused kernel's C++ source"
    undeclared = []
    for path in data:
        rel = path.relative_to(ROOT)
        # a pattern of a package may reach into its data subfolders (``"interp.report" = ["assets/*.js"]``)
        owners = [(".".join(rel.parts[:i]), "/".join(rel.parts[i:])) for i in range(1, len(rel.parts))]
        if not any(fnmatch.fnmatch(sub, pat) for pkg, sub in owners for pat in declared.get(pkg, [])):
            undeclared.append(rel.as_posix())
    assert not undeclared, f"not in [tool.setuptools.package-data] of pyproject.toml, so missing from the wheel: {undeclared}"


def test_docs_extra_lists_the_site_builders():
    docs = " ".join(PYPROJECT["project"]["optional-dependencies"]["docs"])
    for name in ("mkdocs", "mkdocs-material", "mkdocstrings[python]", "mkdocs-jupyter"):
        assert name in docs


def test_every_subpackage_declares_its_public_names():
    """The public API is ``interp``'s exports plus each subpackage's ``__all__`` (issue 36): every subpackage declares
    one, and every name in it resolves (a submodule or an attribute)."""
    import importlib
    import pkgutil

    import interp

    for info in pkgutil.iter_modules(interp.__path__):
        if not info.ispkg:
            continue
        pkg = importlib.import_module(f"interp.{info.name}")
        assert hasattr(pkg, "__all__"), f"interp.{info.name} has no __all__"
        for name in pkg.__all__:
            assert hasattr(pkg, name) or importlib.util.find_spec(f"interp.{info.name}.{name}") is not None, (info.name, name)
