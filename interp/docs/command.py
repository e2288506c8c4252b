"""The ``check | write`` command line that the generated docs pages share (``python -m interp.docs.claims``, ``...analyses``)."""

from __future__ import annotations

import sys
from typing import Callable


def check_or_write(argv: list[str] | None, module: str, check: Callable[[], list[str]], write: Callable[[], str]) -> int:
    """``write``: regenerate the page and print what was written, exit 0; ``check``: print the problems (or ``ok``),
    exit 1 when there are any; anything else: the usage line on stderr, exit 2. ``argv`` defaults to ``sys.argv[1:]``."""
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["write"]:
        print(write())
        return 0
    if args[:1] == ["check"]:
        problems = check()
        print("\n".join(problems) or f"{module.rsplit('.', 1)[-1]}: ok")
        return 1 if problems else 0
    print(f"usage: python -m {module} check | write", file=sys.stderr)
    return 2
