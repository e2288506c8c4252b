"""The report's heavy-hitter section: the HTML fragment is pinned by a snapshot (hand-made table, hostile token text;
``INTERP_UPDATE_SNAPSHOTS=1`` rewrites it after an intended change), and on a scan of a tiny model the page shows each
head's top tokens from ``interp.measures.heavy_hitters``, decoded and escaped, with the class shares."""

from __future__ import annotations

import html
import os
import re
from pathlib import Path

import pandas as pd
import pytest

from interp.engine import ScanConfig, scan
from interp.measures import heavy_hitters as hh
from interp.report.heavy_hitters import HH_LIFT_MIN_KEYS, HH_TOP, heavy_hitter_html
from interp.report.page import render
from interp.report.tables import heavy_hitter_cells

SNAPSHOTS = Path(__file__).parent / "snapshots"
HOSTILE = "</script><b>x</b>&amp;"


def _table() -> pd.DataFrame:
    rows = [(0, 0, 0, 10, "\n", "newline", 0.4, 0.1), (0, 0, 1, 256, "<bos>", "BOS", 0.2, 0.01),
            (0, 1, 0, 7, HOSTILE, "word", 0.25, 0.05), (0, 1, 1, 46, ".", "punctuation", 0.15, 0.05),
            (1, 0, 0, 32, " ", "space", 0.3, 0.2), (1, 0, 1, 10, "\n", "newline", 0.1, 0.1)]
    t = pd.DataFrame(rows, columns=["layer", "head", "rank", "token_id", "token", "class", "share", "key_share"])
    return t.assign(lift=t["share"] / t["key_share"])


def test_fragment_snapshot():
    lifted = _table().iloc[[1, 0, 2, 3, 4]].assign(rank=[0, 1, 0, 1, 0])
    got = heavy_hitter_html(_table(), skip=4, n_prompts=3, lifted=lifted, min_key_share=0.02)
    assert "ids on at least 2% of the keys" in got
    assert re.search(r'<td class="hh-lift"><code>\u201c&lt;bos&gt;\u201d</code> 20.0% x20.0 &nbsp; <code>\u201c\\n\u201d</code>', got)
    assert HOSTILE not in got and html.escape(HOSTILE) in got and "<b>" not in got
    assert "\u201c\\n\u201d" in got  # a newline token is shown as the two characters \n
    # class shares: 2 of 6 entries newline, 1 BOS, 1 punctuation, 1 space, 1 word; attention 0.5 / 1.4 on newlines
    assert "33% newline" in got and "17% BOS" in got and "<td>35.7%</td>" in got
    path = SNAPSHOTS / "heavy_hitters_fragment.html"
    if os.environ.get("INTERP_UPDATE_SNAPSHOTS") == "1" or not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(got, encoding="utf-8")
        if os.environ.get("INTERP_UPDATE_SNAPSHOTS") != "1":
            pytest.fail(f"snapshot {path} was missing and has been written; re-run the test")
    assert got == path.read_text(encoding="utf-8"), "heavy-hitter HTML changed: INTERP_UPDATE_SNAPSHOTS=1 pytest tests/report to accept"


def test_cells_in_layer_head_rank_order():
    cells = heavy_hitter_cells(_table().sample(frac=1, random_state=0))
    assert [(l, h) for l, h, _ in cells] == [(0, 0), (0, 1), (1, 0)]
    assert cells[0][2] == [("\u201c\\n\u201d", "40.0% x4.0"), ("\u201c<bos>\u201d", "20.0% x20.0")]
    no_text = _table().assign(token="", **{"class": ""})
    assert heavy_hitter_cells(no_text)[0][2][0][0] == "id 10"
    assert "needs the model's tokenizer" in heavy_hitter_html(no_text, 4, 1)


@pytest.fixture(scope="module")
def page_and_table(tiny_llama):
    text = "Hi, <b>you</b> & me.\nSo: </script> ok.\n" * 3
    toks = tiny_llama.tokenizer(text, return_tensors="pt")["input_ids"][0]
    res = scan(tiny_llama, [toks, toks[5:]], ScanConfig(heavy_hitters=True, block_size=8))
    lifted = hh.heavy_hitter_tokens(res, tiny_llama.tokenizer, HH_TOP, by="lift", min_key_share=HH_LIFT_MIN_KEYS)
    return render(res, tokenizer=tiny_llama.tokenizer), hh.heavy_hitter_tokens(res, tiny_llama.tokenizer, HH_TOP), lifted


def test_report_shows_each_heads_top_tokens(page_and_table, tiny_llama):
    page, table, lifted = page_and_table
    assert "Heavy-hitter tokens" in page and "2 prompts, keys 0..3" in page
    body = page[page.index("Heavy-hitter tokens"):]
    rows = re.findall(r'<tr><td>(\d+)</td><td>(\d+)</td><td class="hh-toks">(.*?)</td><td class="hh-lift">(.*?)</td></tr>', body)
    card = tiny_llama.card
    assert len(rows) == card.n_layers * card.n_heads
    assert (lifted["key_share"] >= HH_LIFT_MIN_KEYS).all() and len(lifted) == len(table)
    for layer, head, *cells in rows:
        for cell, tab in zip(cells, (table, lifted)):
            want = tab[(tab["layer"] == int(layer)) & (tab["head"] == int(head))].sort_values("rank")
            shown = re.findall(r"<code>(.*?)</code> ([\d.]+)% x([\d.]+)", cell)
            assert len(shown) == len(want) == HH_TOP
            for (label, share, lift), r in zip(shown, want.itertuples()):
                assert html.unescape(label) == "\u201c" + r.token.replace("\n", "\\n") + "\u201d"
                assert float(share) == pytest.approx(100 * r.share, abs=0.051)
                assert float(lift) == pytest.approx(r.lift, abs=0.051)
    assert "</script> ok" not in body.split("<script>")[0]  # prompt text never raw in the section


def test_report_without_the_measure_has_no_section(tiny_llama):
    res = scan(tiny_llama, [tiny_llama.tokenizer("abc def", return_tensors="pt")["input_ids"][0]], ScanConfig(block_size=8))
    assert "Heavy-hitter tokens" not in render(res)
