"""The documentation's tooling: numbers bound to table cells (``interp.docs.numbers``: ``{{ num(...) }}`` templates,
their check, lock and render) and verdicts with their evidence (``interp.docs.claims``: ``docs/claims.yml`` ->
``docs/results/claims.md``). Run as ``python -m interp.docs.numbers check|lock|render|find`` and
``python -m interp.docs.claims``; the MkDocs hook (``docs/hooks/numbers.py``) calls the same code. Nothing in the
library imports this package: it reads ``figures/`` and ``docs/``, not models.
"""

__all__ = ["analyses", "claims", "command", "numbers"]  # its modules: the API is each module's public names
