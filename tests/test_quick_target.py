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
    assert "test-quick:" in (ROOT / "Makefile").read_text() and "\ntest: venv\n\t$(BIN)/python -m pytest -q\n" in (ROOT / "Makefile").read_text()
