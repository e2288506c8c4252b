"""The HTML report: self-contained, escaped, with the SDH table in order (snapshot of its structure)."""

import re

import pytest

from interp.report.page import render, sdh_table
from interp.scan import ScanConfig, scan
from tests.conftest import random_tokens


@pytest.fixture(scope="module")
def result(tiny_llama):
    res = scan(tiny_llama, [random_tokens(80, seed=s) for s in range(2)], ScanConfig(map_size=16, long_lags=(20, 60), long_min_entries=20))
    res.meta["sample_tokens"] = ["<script>alert('x')</script>", "&amp;", "plain"]
    return res


def test_report_is_self_contained(result):
    page = render(result)
    assert not re.search(r"""<(script|link|img|iframe)[^>]+(src|href)\s*=\s*["']?(https?:)?//""", page, re.I)
    assert "Plotly.newPlot" in page and len(page) > 1_000_000  # plotly.js inlined
    for section in ("Model card", "Per-head measurements", "Slash-dominant heads", "Any head", "Long-range slash", "Sinks"):
        assert section in page


def test_tokens_are_escaped(result):
    page = render(result)
    assert "<script>alert('x')</script>" not in page
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in page
    assert "<\\/script>" in page  # the same token inside embedded JSON cannot close the script tag


def test_sdh_table_sorted_and_complete(result):
    heads = result.heads
    table = sdh_table(heads)
    assert len(table) == int(heads["is_sdh"].sum())
    assert table["slash_score"].is_monotonic_decreasing
    page = render(result)
    body = page.split('<table class="tbl sdh">')[1].split("</table>")[0]
    assert body.count("<tr>") == len(table) + 1  # header + one row per SDH
