"""``make test-quick`` (issue 49): every file, glob and test the Makefile's TEST_QUICK leaves out still exists, so a
renamed test cannot slip back into the quick subset unnoticed (or out of it silently); the README names the target."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _quick_args() -> list[str]:
    text = (ROOT / "Makefile").read_text().replace("\\\n", " ")
    line = next(ln for ln in text.splitlines() if ln.startswith("TEST_QUICK :="))
    return re.findall(r"--(?:ignore|ignore-glob|deselect)=\S+", line)


def test_every_left_out_path_exists():
    args = _quick_args()
    assert len(args) > 10
    for arg in args:
        option, value = arg[2:].split("=", 1)
        value = value.strip("'")
        if option == "ignore":
            assert (ROOT / value).is_file(), arg
        elif option == "ignore-glob":
            assert list(ROOT.glob(value)), arg
        else:
            path, name = value.split("::")
            assert re.search(rf"^def {re.escape(name)}\(", (ROOT / path).read_text(), re.M), arg


def test_the_readme_names_both_test_commands():
    readme = (ROOT / "README.md").read_text()
    assert "make test " in readme and "make test-quick" in readme
    make = (ROOT / "Makefile").read_text()
    assert "test-quick:" in make and "TEST_PARALLEL = -n $(TEST_WORKERS) --dist loadfile" in make
    assert re.search(r"^test: venv.*\n\t\$\(BIN\)/python -m pytest -q \$\(TEST_PARALLEL\)\n", make, re.M)  # CI's command
    assert re.search(r"^test-serial: venv.*\n\t\$\(BIN\)/python -m pytest -q\n", make, re.M)


def test_parallel_scopes_keep_files_whole_and_ray_on_one_worker():
    """make test-parallel: a test file stays on one worker; every file that starts a Ray cluster (``ray`` imported at
    module level) shares the scope "ray", so two clusters never run at once."""
    from tests.conftest import xdist_scope

    assert xdist_scope("tests/engine/test_executor.py") == xdist_scope("tests/experiments/test_sharded.py") == "ray"
    assert xdist_scope("tests/engine/test_scan.py") == "tests/engine/test_scan.py"
    assert xdist_scope("tests/missing.py") == "tests/missing.py"
    ray_files = {p.relative_to(ROOT).as_posix() for p in ROOT.glob("tests/**/test_*.py") if xdist_scope(p.relative_to(ROOT).as_posix()) == "ray"}
    assert ray_files >= {"tests/engine/test_executor.py", "tests/experiments/test_sharded.py"}
    for path in ROOT.glob("tests/**/test_*.py"):  # a test that calls ray.init lives in a "ray" file
        if re.search(r"^\s+ray\.init\(", path.read_text(), re.M):
            assert path.relative_to(ROOT).as_posix() in ray_files, path
