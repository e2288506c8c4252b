"""One direction of imports: a module imports only modules of its own layer or lower ones (``interp`` layout).

Layers, lowest first (a module's layer is the longest prefix listed): leaves (``errors``, ``attention``, ``corpus``,
``io``), ``rope``, ``models.arch`` / ``models.tiny``, ``models`` (zoo, card, loaders and ``models.taps``, the tap on every
attention call that the card's 2-token probe reads), ``hooks`` (capture, interventions), ``measures``, ``engine``,
``experiments``, ``report``, ``cli`` and ``docs`` (the documentation's tooling). ``interp.lab`` is a plugin: nothing
outside it imports it. ``interp/__init__.py`` (lazy names) is exempt. No module only re-exports another (old-path
shims are gone: one name per thing).
"""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "interp"

LAYERS = [
    ["interp.errors", "interp.attention", "interp.corpus", "interp.io"],
    ["interp.rope"],
    ["interp.models.arch", "interp.models.tiny"],
    ["interp.models"],
    ["interp.hooks"],
    ["interp.measures"],
    ["interp.engine"],
    ["interp.experiments"],
    ["interp.report"],
    ["interp.cli", "interp.docs"],
]
EXEMPT = {"interp"}


def _layer(mod: str) -> int | None:
    best, rank = -1, None
    for i, prefixes in enumerate(LAYERS):
        for p in prefixes:
            if (mod == p or mod.startswith(p + ".")) and len(p) > best:
                best, rank = len(p), i
    return rank


def _modules():
    for path in PKG.rglob("*.py"):
        rel = path.relative_to(PKG.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        yield ".".join(parts), path


def _imports(path: Path, mod: str) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.level:
                base = mod.split(".")[: -node.level] if not path.name == "__init__.py" else mod.split(".")[: len(mod.split(".")) - node.level + 1]
                name = ".".join(base + [node.module])
            else:
                name = node.module
            out.add(name)
            out |= {f"{name}.{a.name}" for a in node.names}  # `from interp.x import submodule`
    return {n for n in out if n == "interp" or n.startswith("interp.")}


def test_imports_go_down_the_layers():
    bad = []
    for mod, path in _modules():
        if mod in EXEMPT or mod.startswith("interp.lab"):
            continue
        own = _layer(mod)
        assert own is not None, f"{mod} is in no layer: add it to LAYERS"
        for imp in _imports(path, mod):
            if imp.startswith("interp.lab"):
                bad.append(f"{mod} imports the lab plugin ({imp})")
                continue
            if imp == "interp":
                continue
            target = _layer(imp)
            if target is not None and target > own:
                bad.append(f"{mod} (layer {own}) imports {imp} (layer {target})")
    assert not bad, "\n".join(bad)


def _only_reexports(tree: ast.Module) -> bool:
    """A module whose body is imports (plus a docstring, ``__all__``, warnings and calls such as an old-path shim's
    ``moved(...)``) and defines nothing: a second name for another module."""
    body = [n for n in tree.body if not (isinstance(n, ast.Expr) and isinstance(getattr(n, "value", None), ast.Constant))]
    body = [n for n in body if not (isinstance(n, ast.ImportFrom) and n.module == "__future__")]
    defines = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Assign, ast.AnnAssign, ast.If, ast.With, ast.For, ast.Try)
    defs = [n for n in body if isinstance(n, defines) and not (isinstance(n, ast.Assign) and any(
        isinstance(t, ast.Name) and t.id == "__all__" for t in n.targets))]
    return any(isinstance(n, (ast.Import, ast.ImportFrom)) for n in body) and not defs


def test_no_module_only_reexports_another():
    """Every module under ``interp/`` but a package's ``__init__`` (its public face) defines something: a module that
    only imports another's names is an old path kept alive, two names for one thing (issue 36)."""
    bad = [mod for mod, path in _modules() if path.name not in ("__init__.py", "__main__.py") and _only_reexports(ast.parse(path.read_text()))]
    assert not bad, f"modules that only re-export another: {bad}; import the real path instead"


def test_the_reexport_check_sees_a_shim():
    """The check above flags the old shims' two shapes (``moved(...)`` and a list of imports) and passes a real module."""
    assert _only_reexports(ast.parse('"""Moved."""\nfrom interp._compat import moved\n\nmoved(__name__, "interp.hooks.taps")\n'))
    assert _only_reexports(ast.parse('from __future__ import annotations\nimport warnings\nfrom interp.engine import scan  # noqa\n'
                                     'warnings.warn("moved", DeprecationWarning)\n'))
    assert not _only_reexports(ast.parse("import torch\n\ndef f():\n    return torch.zeros(1)\n"))
