"""Issue 49 (7): the report's headings say what they show in plain words before any of the papers' symbols (kappa,
delta, InP, r1, "004 Def. 3.1"), which come after, in parentheses; the first tokens are one box each with visible white
space; the site's quick-start code blocks fit the page without a horizontal scroll bar."""

from __future__ import annotations

import html
import re
from pathlib import Path

from interp.engine import ScanConfig, scan
from interp.report.page import render, token_strip
from tests.conftest import random_tokens

ROOT = Path(__file__).resolve().parents[2]
SYMBOLS = re.compile(r"\b(kappa|delta|InP|r1|R95|Def\.|eq\.|App\.|00[0-4])\b|\|")


def test_headings_put_plain_words_before_symbols(tiny_llama):
    res = scan(tiny_llama, [random_tokens(64, seed=s) for s in range(2)], ScanConfig(inp=True, map_size=16))
    page = render(res)
    headings = [html.unescape(re.sub(r"<[^>]+>", "", h)) for h in re.findall(r"<h[23][^>]*>(.*?)</h[23]>", page)]
    assert any(h.startswith("Slash-dominant heads:") for h in headings), headings
    for h in headings:
        plain = h.split("(")[0]
        assert not SYMBOLS.search(plain), h  # a symbol or a paper reference only inside the parentheses, after the words
    sdh = next(h for h in headings if h.startswith("Slash-dominant heads:"))
    assert "mean attention at least 0.1 at one lag 0..4 (kappa; paper 004, Def. 3.1, eq. 6)" in sdh


def test_the_first_tokens_are_boxes_with_visible_white_space():
    strip = token_strip(["<s>", " def", "\n", "\t", ""])
    boxes = re.findall(r'<span class="tok"><span class="pos">(\d+)</span>(.*?)</span>', strip)
    assert boxes == [("0", "&lt;s&gt;"), ("1", "\u00b7def"), ("2", "\u21b5"), ("3", "\u2192"), ("4", "\u2205")]
    css = (ROOT / "interp" / "report" / "assets" / "report.css").read_text()
    assert ".tokstrip{display:flex;flex-wrap:wrap;gap:" in css  # spaced boxes that wrap, not one run-on line


def test_quick_start_code_blocks_fit_without_scrolling():
    """Material for MkDocs shows about 80 monospace columns in the content column: longer lines scroll sideways."""
    for page in ("docs/index.md", "docs/getting-started.md"):
        text = (ROOT / page).read_text()
        for block in re.findall(r"```[a-z]*\n(.*?)```", text, flags=re.S):
            for line in block.splitlines():
                assert len(line) <= 80, (page, line)
