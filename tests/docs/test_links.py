"""Issue 49: the docs build fails on a link to a missing file and on a link to a file excluded from the site
(mkdocs.yml's `validation` and docs/hooks/links.py); the figures a page links are shipped."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
yaml = pytest.importorskip("yaml")
pytest.importorskip("mkdocs", reason="the docs extra (pip install -e '.[docs]', make docs) builds the site")


def _project_config() -> dict:
    text = (ROOT / "mkdocs.yml").read_text()
    return yaml.load(text, Loader=yaml.BaseLoader)  # BaseLoader: mkdocs' !!python tags, if any, stay plain strings


def _build(tmp_path: Path, page: str) -> subprocess.CompletedProcess:
    """``mkdocs build --strict`` of a one-page site with the project's validation settings and links hook."""
    docs = tmp_path / "docs"
    (docs / "figures").mkdir(parents=True)
    (docs / "figures" / "shipped.csv").write_text("a\n1\n")
    (docs / "figures" / "left_out.html").write_text("<p>excluded</p>")
    (docs / "index.md").write_text(page)
    cfg = {"site_name": "t", "docs_dir": "docs", "site_dir": str(tmp_path / "site"), "strict": True,
           "exclude_docs": "figures/*.html\n", "hooks": [str(ROOT / "docs/hooks/links.py")],
           "validation": _project_config()["validation"]}
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(cfg))
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "-f", str(tmp_path / "mkdocs.yml")], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300, env={"NO_MKDOCS_2_WARNING": "1", "PATH": ""})


def test_a_link_to_an_excluded_or_missing_file_fails_the_build(tmp_path):
    res = _build(tmp_path, "# t\n\n[ok](figures/shipped.csv) [out](figures/left_out.html) [gone](figures/gone.html)\n")
    assert res.returncode != 0, res.stderr
    assert "WARNING -  Doc file 'index.md' contains a link to 'figures/left_out.html' which is excluded" in res.stderr
    assert "contains a link 'figures/gone.html', but the target is not found" in res.stderr
    assert "Aborted with 2 warnings in strict mode" in res.stdout + res.stderr and "shipped.csv" not in res.stderr


def test_links_to_shipped_files_build(tmp_path):
    res = _build(tmp_path, "# t\n\n[ok](figures/shipped.csv)\n")
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "site" / "figures" / "shipped.csv").exists() and not (tmp_path / "site" / "figures" / "left_out.html").exists()


def test_the_site_uses_the_hook_and_ships_the_figures_its_pages_link():
    """Every ``figures/*.html`` a page links is un-excluded by a ``!`` pattern of ``exclude_docs`` and exists (the
    full check is ``make docs``: --strict with the hook)."""
    from fnmatch import fnmatch

    cfg = _project_config()
    assert cfg["strict"] == "true" and "docs/hooks/links.py" in cfg["hooks"]
    assert cfg["validation"]["links"]["not_found"] == "warn" and cfg["validation"]["nav"]["not_found"] == "warn"
    shipped = [line.strip()[1:] for line in cfg["exclude_docs"].splitlines() if line.strip().startswith("!")]
    linked = {m for page in (ROOT / "docs").rglob("*.md") for m in re.findall(r"\]\((?:\.\./)*(figures/[^)#\s]+\.html)\)", page.read_text())}
    assert linked, "expected the emergence page's interactive figures"
    for path in sorted(linked):
        assert any(fnmatch(path, pat) for pat in shipped) and (ROOT / path).exists(), path
