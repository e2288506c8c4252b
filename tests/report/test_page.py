"""The HTML report: self-contained, escaped, with the SDH table in order (snapshot of its structure)."""

import re

import pytest

from interp.report.page import render, sdh_table
from interp.engine import ScanConfig, scan
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
    assert "\\u003c/script\\u003e" in page  # the same token inside embedded JSON cannot close the script tag
    scripts = re.findall(r"<script>(.*?)</script>", page, flags=re.S)
    assert not any("<!--" in s for s in scripts)  # nor open a comment that swallows the next script


def test_sdh_table_sorted_and_complete(result):
    heads = result.heads
    table = sdh_table(heads)
    assert len(table) == int(heads["is_sdh"].sum())
    assert table["slash_score"].is_monotonic_decreasing
    page = render(result)
    body = page.split('<table class="tbl sdh">')[1].split("</table>")[0]
    assert body.count("<tr>") == len(table) + 1  # header + one row per SDH


def test_long_range_section_puts_consistent_heads_first_and_marks_content_repeats():
    """Issue 13: the synthetic repeat (one prompt) is listed as a content repeat naming prompt 2; the positional
    slash leads the consistent table."""
    from tests.measures.test_long_range import LAG_POS, LAG_REPEAT, _result

    res = _result([0, 1, 2])
    res.meta["sample_tokens"] = []
    page = render(res)
    head = page.split("Long-range slash-dominant heads")[1]
    assert ": 1 with mean attention at least 0.001 at one lag in 30..100, in at least 67% of the 3 prompts" in head
    consistent, repeats = head.split("Content repeats")
    first_row = consistent.split("<tbody>")[1].split("</tr>")[0]
    assert [c for c in re.findall(r"<td>([^<]*)</td>", first_row)][:2] == ["0", "1"] and f"<td>{LAG_POS}</td>" in first_row
    rep_row = repeats.split("<tbody>")[1].split("</tr>")[0]
    cells = re.findall(r"<td>([^<]*)</td>", rep_row)
    assert cells[:3] == ["0", "0", str(LAG_REPEAT)] and cells[4:7] == ["1", "3", "2"]  # 1 of 3 prompts: prompt 2


def test_inp_heatmap_shows_keys_by_planes(tiny_llama):
    from interp.report.figures import inp_heatmap

    res = scan(tiny_llama, [random_tokens(40, seed=1)], ScanConfig(map_size=16, inp=True))
    z = res.inp_query_map()[1, 2].numpy()
    fig = inp_heatmap(z, 15)
    assert fig.data[0].z.shape == (16, tiny_llama.card.d_head // 2) and fig.layout.yaxis.autorange == "reversed"
    page = render(res)
    assert 'id="pick-inp"' in page and '"inpq_shape": [16, 8]' in page


def test_embedded_inp_map_decodes_to_the_scan_values(tiny_llama):
    """The picker's int16 InP map, decoded as the page's script does, equals the scan's map to 2e-5 of each head's max."""
    import base64

    import numpy as np

    from interp.report.page import _picker_data

    res = scan(tiny_llama, [random_tokens(40, seed=1)], ScanConfig(map_size=16, inp=True))
    d = _picker_data(res)
    q = np.frombuffer(base64.b64decode(d["inpq"]), dtype="<i2").reshape(2, 4, 16, 8) * np.array(d["inpq_scale"])[:, :, None, None]
    want = res.inp_query_map().numpy()
    assert np.abs(q - want).max() <= 2e-5 * np.abs(want).max()


def test_embedded_attention_maps_decode_to_the_scan_values(tiny_llama):
    """The picker's uint16 maps, decoded as the page's script does (v / 65535), equal the scan's maps to 7.7e-6."""
    import base64

    import numpy as np

    from interp.report.page import _picker_data

    res = scan(tiny_llama, [random_tokens(40, seed=2)], ScanConfig(map_size=16))
    d = _picker_data(res)
    got = np.frombuffer(base64.b64decode(d["maps"]), dtype="<u2").reshape(2, 4, 16, 16) / 65535
    assert np.abs(got - res.maps().numpy()).max() <= 0.5 / 65535 + 1e-9


def test_compare_puts_scans_side_by_side(tmp_path, tiny_llama):
    import pandas as pd

    from typer.testing import CliRunner

    from interp import load_model
    from interp.cli import app
    from interp.report.compare import compare_table, summary

    prompts = [random_tokens(48, seed=s) for s in range(2)]
    a = scan(tiny_llama, prompts, ScanConfig(map_size=8))
    b = scan(load_model("tiny-qwen2", device="cpu"), prompts, ScanConfig(map_size=8))
    table = compare_table([a, b])
    assert list(dict.fromkeys(table["model"])) == ["tiny-llama", "tiny-qwen2"] and len(table) == 16
    s = summary(table)
    for m, r in zip(("tiny-llama", "tiny-qwen2"), (a, b)):
        h = r.heads
        row = s[s["model"] == m].iloc[0]
        assert row["sdh"] == h["is_sdh"].sum() and row["sink_rate"] == h["has_sink"].mean()
        assert sum(row[f"sdh_lag{d}"] for d in range(5)) == h["is_sdh"].sum()
        assert row["median_r1_q"] == h["r1_q"].median()
    for i, r in enumerate((a, b)):
        r.save(tmp_path / f"s{i}" / "state")
    res = CliRunner().invoke(app, ["compare", str(tmp_path / "s0"), str(tmp_path / "s1"), "--out", str(tmp_path / "cmp")])
    assert res.exit_code == 0, res.output
    page = (tmp_path / "cmp" / "compare.html").read_text()
    assert "cmp-scatter" in page and "s0" in page and "s1" in page and "<script src=" not in page  # named by folder
    assert len(pd.read_csv(tmp_path / "cmp" / "compare.csv")) == 16
    bad = CliRunner().invoke(app, ["compare", str(tmp_path / "s0"), str(tmp_path / "s1"), "--names", "x,x", "--out", str(tmp_path / "x")])
    assert bad.exit_code == 2 and "--names" in bad.output


def test_heatmaps_use_integer_layer_and_head_ticks(result):
    from interp.report.figures import metric_heatmaps

    fig = metric_heatmaps(result.heads)
    assert fig.layout.xaxis.dtick == 1 and fig.layout.yaxis.dtick == 1 and fig.layout.xaxis.tick0 == 0
