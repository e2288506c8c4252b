"""MkDocs hook (mkdocs.yml `hooks:`): a page's link to a file excluded from the site (`exclude_docs`) counts as a link
to a missing file.

MkDocs 1.6 logs a link to a missing file at `validation.links.not_found` (`warn` here, so `--strict` fails), but a
link to an excluded file at INFO at most, whatever the validation settings say (`mkdocs/structure/pages.py`): the
built site would carry a dead link and `--strict` lets it through. on_config gives those records the level of
`validation.links.not_found`, so one setting governs both and `make docs` fails on either.
"""

from __future__ import annotations

import logging

EXCLUDED = "which is excluded from the built site"  # mkdocs' message for a link to an excluded file


class _ExcludedIsNotFound(logging.Filter):
    """Raise mkdocs' INFO record of a link to an excluded file to ``level`` (the ``not_found`` setting)."""

    def __init__(self, level: int = logging.WARNING):
        super().__init__()
        self.level = level

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno == logging.INFO and EXCLUDED in record.getMessage() and self.level > logging.INFO:
            record.levelno, record.levelname = self.level, logging.getLevelName(self.level)
        return True


_FILTER = _ExcludedIsNotFound()


def on_config(config):
    """Install the filter on mkdocs' page logger (once) at the level of ``validation.links.not_found``."""
    _FILTER.level = config.validation.links.not_found
    log = logging.getLogger("mkdocs.structure.pages")
    if _FILTER not in log.filters:
        log.addFilter(_FILTER)
    return config
