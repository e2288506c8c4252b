"""analyses/p001_frayed/sink_beyond.py: one capture's prefix means equal ``interp.scan`` of each prefix."""

import numpy as np
import pytest

import interp
from analyses.p001_frayed.sink_beyond import LAST, MEASURES, SPECTRUM, figure, main, parse_lengths, prefix_means
from tests.conftest import random_tokens


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-gemma3"])
def test_prefix_means_with_every_row_equal_a_scan_of_each_prefix(name):
    """Causality: the first n positions of one forward are a forward of the n-token prefix, so with every query row
    (rows >= n: exact) the four means equal the scan's columns on that prefix, and the prefix Grams summed chunk by
    chunk give the scan's stable ranks and FSV ratio (tiny-gemma3: sliding window 8, QK-norm)."""
    model = interp.load_model(name)
    toks = random_tokens(48, seed=3)
    cap = interp.capture(model, toks)
    got = prefix_means(model, cap, [48, 12, 30], rows=32)  # unsorted: the Grams accumulate in length order
    cfg = interp.ScanConfig(counterfactual_queries=0, max_qk_queries=10_000, geometry=True, cluster_points=100)
    for n in (12, 30, 48):
        heads = interp.scan(model, toks[None, :n], cfg).heads.sort_values(["layer", "head"])
        for m in MEASURES + SPECTRUM:
            np.testing.assert_allclose(got[n][m].ravel(), heads[m].to_numpy(), rtol=2e-5, atol=1e-6, err_msg=f"{m} at {n}")


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-gemma3"])
def test_last_rows_means_are_the_prefix_means_difference(name):
    """The mean over the last r queries of an n-token prefix is (n * mean_n - (n - r) * mean_{n-r}) / r, with both
    prefix means exact (every row); with r >= n it is the prefix mean itself."""
    model = interp.load_model(name)
    cap = interp.capture(model, random_tokens(40, seed=4))
    exact = prefix_means(model, cap, [24, 40, 16], rows=64)  # rows >= n: every mean exact
    last = prefix_means(model, cap, [40, 16], rows=16)
    for m in MEASURES:
        want = (40 * exact[40][m] - 24 * exact[24][m]) / 16
        np.testing.assert_allclose(last[40][m + "_last"], want, rtol=1e-9, atol=1e-9, err_msg=m)
        np.testing.assert_allclose(last[16][m + "_last"], exact[16][m], rtol=1e-9, atol=1e-9, err_msg=m)
        assert not np.allclose(last[40][m + "_last"], exact[40][m]), m  # the last queries differ from the average


def test_stratified_rows_estimate_is_close_to_the_exact_mean():
    model = interp.load_model("tiny-llama")
    cap = interp.capture(model, random_tokens(256, seed=5))
    exact, est = prefix_means(model, cap, [256], rows=128)[256], prefix_means(model, cap, [256], rows=32)[256]
    for m in MEASURES:  # the first 32 rows and one in each of 32 strata of the other 224: the estimate is near, not equal
        assert np.abs(est[m] - exact[m]).max() < 0.1 * np.abs(exact[m]).max() + 1e-3, m
        assert not np.array_equal(est[m], exact[m])


def test_quick_run_writes_both_tables(tmp_path):
    import pandas as pd

    main(["--quick", "--out", str(tmp_path)])
    per = pd.read_csv(tmp_path / "sink_beyond_prompts.csv")
    summary = pd.read_csv(tmp_path / "sink_beyond.csv")
    heads = pd.read_csv(tmp_path / "sink_beyond_heads.csv")
    assert set(per["measure"]) == set(MEASURES + LAST + SPECTRUM) and sorted(per["length"].unique()) == [32, 64, 128]
    assert set(summary["length_to"]) == {64, 128} and (summary["prompts"] == 3).all()
    # per head: the mean over the 3 prompts inside its bootstrap interval, one row per layer, head, length and measure
    assert len(heads) == 2 * 4 * 3 * len(MEASURES + LAST + SPECTRUM)  # tiny-llama: 2 layers x 4 heads
    assert (heads["lo"] <= heads["mean"] + 1e-12).all() and (heads["mean"] <= heads["hi"] + 1e-12).all()
    mean = per[(per["length"] == 128) & (per["measure"] == "sink_weight")]["median"]
    assert heads["prompts"].eq(3).all() and len(mean) == 3
    # Fig. 6: per panel two measures x (all, last queries), each a band and a line; the lines carry the prompts' means
    fig = figure(per, 200)
    lines = {(t.xaxis, t.name): t for t in fig.data if t.fill is None}
    assert len(lines) == 8 and (tmp_path / "sink_beyond.html").exists()
    np.testing.assert_allclose(lines["x", "with RoPE, all queries"].y, per[per["measure"] == "sink_weight"].groupby("length")["median"].mean())


def test_lengths_are_token_counts_or_multiples_of_the_context():
    assert parse_lengths("1024, 0.5x,2x,4096", 8192) == [1024, 4096, 16384]
    with pytest.raises(ValueError, match="neither a token count"):
        parse_lengths("4k", 8192)
    with pytest.raises(ValueError, match="at least 2"):
        parse_lengths("0.0001x", 8192)
