"""Browser fixtures: headless Debian Chromium driven by Playwright (tests skip, saying why, where either is missing).

Set-up: ``pip install playwright`` (the Python package only; no ``playwright install``: the system Chromium is
used) and ``apt-get install chromium``; ``INTERP_CHROMIUM`` overrides the browser path.
"""

from __future__ import annotations

import os
import shutil

import pytest


@pytest.fixture(scope="session")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api", reason="browser test needs Playwright: pip install playwright")
    chromium = os.environ.get("INTERP_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        pytest.skip("browser test needs a Chromium: apt-get install chromium (or set INTERP_CHROMIUM)")
    with sync_api.sync_playwright() as p:
        try:
            b = p.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
        except Exception as err:  # noqa: BLE001 - any launch failure is a skip with its reason
            pytest.skip(f"cannot start {chromium} through Playwright: {str(err).splitlines()[0]}")
        yield b
        b.close()


@pytest.fixture
def page(browser):
    """A page that records console errors, page errors, dialogs and every non-file request."""
    pg = browser.new_page()
    pg.problems = []
    pg.on("console", lambda m: m.type in ("error", "warning") and pg.problems.append(f"console {m.type}: {m.text}"))
    pg.on("pageerror", lambda e: pg.problems.append(f"page error: {e}"))
    pg.on("dialog", lambda d: (pg.problems.append(f"dialog: {d.message}"), d.dismiss()))
    pg.on("request", lambda r: r.url.startswith(("file:", "data:", "about:")) or pg.problems.append(f"request: {r.url}"))
    yield pg
    pg.close()
