"""MkDocs hooks (mkdocs.yml `hooks:`): numbers from the committed tables, and the results pages in the nav.

- on_config: a nav entry written as a glob (``results/*.md``) becomes the sorted list of the pages that match, so
  a new ``docs/results/NAME.md`` appears in the nav without editing mkdocs.yml (its title is its first heading).
- on_page_markdown: ``{{ num(...) }}`` / ``{{ rng(...) }}`` templates are filled from ``figures/*.csv`` by
  ``interp.docs.numbers.render`` (a bad template stops the build with one line naming it). A page committed rendered
  (``docs/results/NAME.md``) is built from its template (``docs/templates/results/NAME.md``,
  ``interp.docs.numbers.rendered_pages``), so the site shows the tables as they are now even before the page is
  re-rendered; ``tests/docs/test_numbers.py`` fails while the committed page differs.
"""

from __future__ import annotations

import glob
import os
from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.utils.meta import get_data

from interp.docs import numbers as docs_numbers


def _expand(items, docs_dir):
    out = []
    for item in items:
        if isinstance(item, str) and any(c in item for c in "*?["):
            for path in sorted(glob.glob(os.path.join(docs_dir, item))):
                rel = os.path.relpath(path, docs_dir).replace(os.sep, "/")
                if not rel.endswith("/index.md"):
                    out.append(rel)
        elif isinstance(item, dict):
            out.append({k: _expand(v, docs_dir) if isinstance(v, list) else v for k, v in item.items()})
        else:
            out.append(item)
    return out


def on_config(config):
    if config.get("nav"):
        config["nav"] = _expand(config["nav"], config["docs_dir"])
    return config


def on_page_markdown(markdown, page, config, files):
    root = os.path.dirname(os.path.abspath(config["config_file_path"]))
    path = os.path.relpath(os.path.join(config["docs_dir"], page.file.src_path), root).replace(os.sep, "/")
    source = docs_numbers.rendered_pages(root).get(path)
    if source:  # the page's template, without front matter (mkdocs has read the page's own into page.meta)
        markdown, _ = get_data(Path(root, source).read_text(encoding="utf-8"))
    try:
        return docs_numbers.render(markdown, root)
    except docs_numbers.DocsNumberError as err:
        raise PluginError(f"{page.file.src_path}: {err}") from None
