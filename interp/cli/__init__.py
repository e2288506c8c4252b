"""Command line: ``interp models | scan | atlas | ablate | sweep | view | merge | compare | report | verify | retrieval |
effects | trajectory | kvsplit``.

One module per command, each a thin parser over the experiment API (``interp.experiments``, ``interp.engine``,
``interp.report``): it checks its options and paths before a model loads (``interp.cli.common``: the shared options,
``fail`` for one line and exit 2) and imports the heavy stack only inside the command, so ``interp --help`` stays fast.
A new command is a new module here that decorates its function with ``@app.command()`` and is imported below (the
import order is the order of ``interp --help``).
"""

from __future__ import annotations

from interp.cli.common import app
# each module registers its command; the import order is the order of ``interp --help``
from interp.cli import models, scan, atlas, ablate, sweep, view, merge, compare, report, verify  # noqa: F401,E402
from interp.cli import retrieval, effects, patch, trajectory, kvsplit  # noqa: F401,E402

__all__ = ["app", "main"]


def main() -> None:
    """Console-script entry point (``interp``, ``python -m interp.cli``)."""
    app()
