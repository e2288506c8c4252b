"""The analysis scripts, one per reproduced artifact, run from the repository root as modules (``python -m analyses.GROUP.SCRIPT``); not part of the installed package."""
