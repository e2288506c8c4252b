"""``python -m interp.cli``: the same as the ``interp`` console script."""

from interp.cli import main

main()
