"""analyses/p004_slash/sdh_count_bootstrap.py, long_range_slash.py and cluster_length.py (issue 21): each statistic against an
independent computation (a plain loop over replicates, the per-prompt scores' mean, a geometry scan), and their quick modes."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from interp.measures import inp as freq
from tests.conftest import load_script

ANALYSES = Path(__file__).resolve().parents[1] / "analyses"
FIG = ANALYSES.parent / "figures"


def same_columns(quick: Path, committed: str) -> None:
    """The quick run's table has the committed table's columns, in order (the script and its figure cannot drift apart)."""
    assert list(pd.read_csv(quick, nrows=1).columns) == list(pd.read_csv(FIG / committed, nrows=1).columns), committed


@pytest.fixture(scope="module")
def sdh():
    return load_script(ANALYSES / "p004_slash/sdh_count_bootstrap.py")


def test_sdh_count_bootstrap_equals_a_plain_loop_over_replicates(sdh):
    rng = np.random.default_rng(1)
    per = rng.uniform(0, 0.2, (6, 3, 4, 5))  # [prompt, layer, head, lag]: many heads near kappa = 0.1
    idx = rng.integers(0, 6, (300, 6))
    got = sdh.count_table(per, idx, 0.1)
    counts = [int((per[i].mean(0).max(-1) >= 0.1).sum()) for i in idx]
    pairs = [int((per[i].mean(0) >= 0.1).sum()) for i in idx]
    assert got["sdh_count"] == int((per.mean(0).max(-1) >= 0.1).sum())
    assert (got["sdh_lo"], got["sdh_hi"]) == tuple(np.nanpercentile(counts, [2.5, 97.5]))
    assert (got["pairs_lo"], got["pairs_hi"]) == tuple(np.nanpercentile(pairs, [2.5, 97.5]))
    best = np.stack([per[i].mean(0).max(-1) for i in idx])
    lo, hi = np.percentile(best, [2.5, 97.5], axis=0)
    assert got["sdh_sure"] == int((lo >= 0.1).sum()) and got["heads_straddling"] == int(((lo < 0.1) & (hi >= 0.1)).sum())
    assert sum(got[f"sdh_lag{d}"] for d in range(5)) == got["sdh_count"]


def test_plane_stats_match_the_inp_module_head_by_head(sdh):
    rng = np.random.default_rng(2)
    mean_abs = rng.exponential(1.0, (2, 3, 11)) ** 3  # 11 planes: bands of 4, 4, 3 planes
    st = sdh.plane_stats(mean_abs)
    for l in range(2):
        for h in range(3):
            act = freq.active_planes(torch.from_numpy(mean_abs[l, h]))
            b = freq.band_counts(act)
            assert (st["active_high"][l, h], st["active_medium"][l, h], st["active_low"][l, h]) == (b["high"], b["medium"], b["low"])
            assert st["top_plane"][l, h] == mean_abs[l, h].argmax() and st["top_low"][l, h] == (mean_abs[l, h].argmax() >= 8)


def test_inp_bootstrap_pools_the_drawn_prompts_sums(sdh):
    """A replicate that draws every prompt once is the full sample; identical prompts give a degenerate interval."""
    rng = np.random.default_rng(3)
    A = np.repeat(rng.exponential(1.0, (1, 2, 3, 9)), 4, 0)
    C = np.full((4, 2, 3), 100.0)
    is_sdh = np.array([[True, False, True], [False, False, True]])
    heads, summ = sdh.inp_tables("m", {"inp_abs": A, "inp_pairs": C}, is_sdh, np.tile(np.arange(4), (20, 1)))
    s = summ.set_index("group")
    full = sdh.plane_stats(A[0] / 100.0)
    assert s.loc["SDHs", "active_high"] == full["active_high"][is_sdh].mean() == s.loc["SDHs", "active_high_lo"] == s.loc["SDHs", "active_high_hi"]
    assert s.loc["other heads", "heads"] == 3 and len(heads) == 6 and heads["is_sdh"].sum() == 3


def test_sdh_count_quick_run(sdh, tmp_path):
    df = sdh.main(["--quick", "--out", str(tmp_path)])  # raises if the per-prompt means and the merged scan disagree
    r = df.iloc[0]
    assert r.sdh_lo <= r.sdh_count <= r.sdh_hi
    summ = pd.read_csv(tmp_path / "inp_planes_summary.csv")
    assert set(summ["group"]) == {"SDHs", "other heads"} and summ["heads"].sum() == r.heads
    heads = pd.read_csv(tmp_path / "inp_planes_heads.csv")
    assert heads["is_sdh"].sum() == r.sdh_count
    for name in ("sdh_count_bootstrap.csv", "inp_planes_summary.csv", "inp_planes_heads.csv"):
        same_columns(tmp_path / name, name)


def test_long_range_quick_run_rules_nest_and_checks_average_the_prompts(tmp_path):
    mod = load_script(ANALYSES / "p004_slash/long_range_slash.py")
    df = mod.main(["--quick", "--out", str(tmp_path)]).set_index("rule")["long_sdh"]
    assert df["mean"] >= df["fraction"] >= df["fraction_loo"]  # each rule keeps a subset of the previous one's heads
    heads = pd.read_csv(tmp_path / "long_range_tiny-llama_heads.csv")
    assert (heads["mean_sdh"] >= heads["fraction_sdh"]).all() and (heads["fraction_sdh"] >= heads["fraction_loo_sdh"]).all()
    assert heads[[f"{r}_sdh" for r in mod.RULES]].sum().tolist() == [df[r] for r in mod.RULES]
    chk = pd.read_csv(tmp_path / "long_range_tiny-llama_checks.csv")
    assert len(chk) == 2
    per = chk[[c for c in chk if c.startswith("prompt") and c.endswith("_score")]].to_numpy()
    np.testing.assert_allclose(per.mean(1), chk["slash_score"], rtol=1e-12)
    np.testing.assert_array_equal((per >= 1e-3).sum(1), chk["prompts_hit"])
    same_columns(tmp_path / "long_range_summary.csv", "long_range_summary.csv")
    for name in ("long_slash", "content_repeats", "heads", "checks"):
        same_columns(tmp_path / f"long_range_tiny-llama_{name}.csv", f"long_range_smollm2-135m_{name}.csv")


def test_cluster_length_equals_a_geometry_scan_of_each_prefix():
    import interp

    mod = load_script(ANALYSES / "p001_frayed/cluster_length.py")
    model = interp.load_model("tiny-llama")
    p = interp.corpus.prompts(model, "random", 2, 96, seed=1)
    per = np.stack([mod.prompt_clusters(model, t, [48, 96], i, 40) for i, t in enumerate(p)])
    # silhouette: float32 distances (interp.measures.geometry: within 1e-6 of float64); Davies-Bouldin: float64
    assert mod.check(model, p, 48, per, [48, 96], 40) < 1e-5
    assert mod.check(model, p, 96, per, [48, 96], 40) < 1e-5
    t = mod.table("tiny-llama", per, [48, 96]).assign(prompt_tokens=96)
    assert set(t["measure"]) == set(mod.MEASURES) and (t["boot_lo"] <= t["boot_hi"]).all()
    assert list(t.columns) == list(pd.read_csv(FIG / "cluster_length.csv", nrows=1).columns)


def test_page_load_quick_sizes_and_browser_times(tmp_path):
    mod = load_script(ANALYSES / "benchmarks" / "page_load.py")
    df = mod.main(["--quick", "--out", str(tmp_path)]).set_index("page")
    written = pd.read_csv(tmp_path / "page_load.csv")
    assert list(written["page"]) == ["empty", "report", "viewer", "viewer"]
    same_columns(tmp_path / "page_load.csv", "page_load.csv")
    assert df.loc["report", "bytes"] > 10 * df.loc["empty", "bytes"]  # the report inlines plotly.js (megabytes)
    if mod.chromium():  # the in-page probe reported a time for every page
        assert written["load_ms_median"].notna().all() and (written["load_ms_median"] > 0).all()


def test_long_range_ood_ratios_are_the_two_prompt_sets_scores_at_each_heads_lag(tmp_path):
    """long_range_slash.py --ood (004 Table 6): each long-range SDH's slash_id / slash_ood are the per-prompt scores'
    means at its lag on the text and the random prompts, the ratio their quotient, and the summary's shares and
    median are those of the table's ratios."""
    mod = load_script(ANALYSES / "p004_slash/long_range_slash.py")
    mod.main(["--quick", "--ood", "--out", str(tmp_path)])
    t = pd.read_csv(tmp_path / "long_range_ood.csv")
    s = pd.read_csv(tmp_path / "long_range_ood_summary.csv").iloc[0]
    heads = pd.read_csv(tmp_path / "long_range_tiny-llama_heads.csv")
    assert len(t) == int(heads["fraction_loo_sdh"].sum()) == s["long_sdh"] and len(t)
    np.testing.assert_allclose(t["ratio"], t["slash_ood"] / t["slash_id"], rtol=1e-12)
    assert s["share_gt_0.5"] == pytest.approx((t["ratio"] > 0.5).mean()) and s["median_ratio"] == pytest.approx(t["ratio"].median())
    assert s["share_gt_0.5_lo"] <= s["share_gt_0.5_hi"] and s["median_ratio_lo"] <= s["median_ratio_hi"]
    # the per-prompt means at a head's lag equal a merged scan's score there (equal-length prompts)
    import interp

    model = interp.load_model("tiny-llama", device="cpu")
    cfg = interp.ScanConfig(counterfactual_sinks=False, **mod.QUICK_LONG)
    text = interp.corpus.prompts(model, "random", 3, 512, 0)
    merged = interp.scan(model, text, cfg)
    r = t.iloc[0]
    assert float(merged.scores[int(r["layer"]), int(r["head"]), int(r["delta"])]) == pytest.approx(r["slash_id"], rel=1e-6)


@pytest.fixture(scope="module")
def rank_one():
    return load_script(ANALYSES / "p004_slash/sdh_rank_one.py")


def test_rank_one_statistics_equal_singular_values_head_by_head(rank_one):
    """r1 from the pooled Gram matrices equals s_1^2 / sum s^2 of the stacked vectors (numpy's SVD), per group."""
    rng = np.random.default_rng(4)
    L, H, K, D, P = 2, 4, 2, 6, 3
    offset = np.array([0.0, 1.0, 3.0, 20.0])[:, None, None]  # per head: no cone to a near-rank-one one
    q = rng.normal(size=(P, L, H, 20, D)) + offset * rng.normal(size=(1, L, H, 1, D))
    k = rng.normal(size=(P, L, K, 20, D)) + 20 * rng.normal(size=(1, L, K, 1, D))
    slash = rng.uniform(0, 0.05, (P, L, H, 5))
    slash[:, :, 1::2, 2] += 0.1  # heads 1 and 3 of each layer are SDHs
    kv = np.arange(H) // (H // K)
    got = rank_one.statistics(slash.mean(0), np.einsum("plhnd,plhne->lhde", q, q), np.einsum("plknd,plkne->lkde", k, k), kv, 0.1)

    def r1(x):  # [n, d] -> s_1^2 / sum s^2
        s = np.linalg.svd(x, compute_uv=False)
        return s[0] ** 2 / (s ** 2).sum()

    r1q = np.array([[r1(q[:, l, h].reshape(-1, D)) for h in range(H)] for l in range(L)])
    r1k = np.array([[r1(k[:, l, kv[h]].reshape(-1, D)) for h in range(H)] for l in range(L)])
    sdh = slash.mean(0).max(-1) >= 0.1
    assert got["sdh_count"] == sdh.sum()
    np.testing.assert_allclose(got["r1_q_sdh"], r1q[sdh].mean(), rtol=1e-10)
    np.testing.assert_allclose(got["r1_k_other"], r1k[~sdh].mean(), rtol=1e-10)
    np.testing.assert_allclose(got["r1_q_diff"], r1q[sdh].mean() - r1q[~sdh].mean(), rtol=1e-10)
    either = (r1q > 0.9) | (r1k > 0.9)
    assert got["share_qk_gt_0.9"] == either[sdh].mean() and got["share_qk_gt_0.9_other"] == either[~sdh].mean()


def test_rank_one_bootstrap_of_the_full_sample_is_the_point_value(rank_one):
    rng = np.random.default_rng(5)
    x = rng.normal(size=(4, 2, 3, 30, 5))
    per = {"slash": rng.uniform(0, 0.2, (4, 2, 3, 5)), "gq": np.einsum("plhnd,plhne->plhde", x, x),
           "gk": np.einsum("plhnd,plhne->plhde", x[:, :, :1], x[:, :, :1])}
    kv = np.zeros(3, dtype=int)
    point = rank_one.statistics(per["slash"].mean(0), per["gq"].sum(0), per["gk"].sum(0), kv, 0.1)
    boot = rank_one.bootstrap(per, kv, np.tile(np.arange(4), (40, 1)), 0.1)  # every replicate draws each prompt once
    for key, v in point.items():
        np.testing.assert_allclose(boot[key], v, rtol=1e-12, equal_nan=True)


def test_rank_one_quick_run_agrees_with_one_scan_of_all_prompts(rank_one, tmp_path):
    """The per-prompt pooled point values equal what one scan of the three prompts reports (its r1_q / r1_k columns)."""
    import interp

    df = rank_one.main(["--quick", "--out", str(tmp_path)]).set_index("statistic")
    model = interp.load_model("tiny-llama")
    heads = interp.scan(model, interp.corpus.prompts(model, "random", 3, 64, 0),
                        interp.ScanConfig(counterfactual_sinks=False, kappa=0.045)).heads
    sdh = heads["is_sdh"].astype(bool)
    assert df.loc["sdh_count", "value"] == sdh.sum()
    np.testing.assert_allclose(df.loc["r1_q_sdh", "value"], heads.loc[sdh, "r1_q"].mean(), rtol=1e-4)
    np.testing.assert_allclose(df.loc["r1_k_other", "value"], heads.loc[~sdh, "r1_k"].mean(), rtol=1e-4)
    assert (df["lo"] <= df["hi"]).all()
