"""Band ablation tables (counterfactual, 004 Table 5 / Fig. 8) and the causal ablation runner."""

import numpy as np
import pytest
import torch

from interp.experiments.ablation import band_ablation_table, band_variants, causal_ablation, ratio_summary
from interp.hooks.intervene import mean_nll, rope_intervention
from interp.engine import ScanConfig, scan
from tests.conftest import random_tokens


@pytest.fixture(scope="module")
def ablated(tiny_llama):
    cfg = ScanConfig(block_size=8, map_size=8, kappa=0.05, variants=band_variants(8, n_remove=2, extra={"p3": [3]}))
    return scan(tiny_llama, [random_tokens(48, seed=s) for s in range(2)], cfg)


def test_band_ablation_table_reads_each_heads_own_lag(ablated):
    t = band_ablation_table(ablated, all_heads=True)
    assert list(t.columns[:9]) == ["layer", "head", "kv_head", "delta", "original", "wo_high", "wo_medium", "wo_low", "p3"]
    for r in t.head(5).itertuples():
        assert r.original == pytest.approx(ablated.scores[r.layer, r.head, r.delta].item())
        assert r.wo_high == pytest.approx(ablated.variant_scores("wo_high")[r.layer, r.head, r.delta].item())
        assert r.ratio_wo_low == pytest.approx(r.wo_low / r.original)
    sdh = band_ablation_table(ablated)
    assert sdh["is_sdh"].all() and len(sdh) == int(ablated.heads["is_sdh"].sum())
    s = ratio_summary(t)
    assert list(s["variant"]) == ["wo_high", "wo_medium", "wo_low", "p3"]
    assert s.loc[0, "median"] == pytest.approx(np.median(t["ratio_wo_high"]))


def test_plane_sets_are_checked():
    with pytest.raises(ValueError, match="must lie in 0..7"):
        band_variants(8, extra={"bad": [8]})


def test_causal_ablation_matches_a_direct_run(tiny_llama):
    prompts = [random_tokens(40, seed=9)]
    var = band_variants(8, n_remove=2)[0]
    res = causal_ablation(tiny_llama, prompts, [var], layers=[0, 1], config=ScanConfig(block_size=8, map_size=8))
    with rope_intervention(tiny_llama, var, layers=[0, 1]):
        want = mean_nll(tiny_llama, prompts)
        direct = scan(tiny_llama, prompts, ScanConfig(block_size=8, map_size=8)).heads
    row = res.summary.iloc[0]
    assert row.band == "wo_high" and row.layers == "0,1" and row.nll == pytest.approx(want)
    assert row.nll_original == pytest.approx(mean_nll(tiny_llama, prompts)) and row.delta_nll == pytest.approx(want - row.nll_original)
    np.testing.assert_allclose(res.heads["sink"].to_numpy(), direct["sink_weight"].to_numpy(), atol=1e-9)


def test_variant_token_scores_equal_a_causal_run_in_layer_0(tiny_llama):
    """Layer 0's counterfactual token-matched scores are the scores the model itself gives with the variant applied in
    layer 0 (its input does not depend on the rotation), computed by a separate scan of the intervened model."""
    from interp.measures.token_match import COLUMNS
    from interp.measures.variants import variant_token_scores

    r = random_tokens(13, seed=4, vocab=40)
    prompts = [np.concatenate([[1], r, r, r]), random_tokens(30, seed=2, vocab=30)]
    prompts = [torch.as_tensor(p) for p in prompts]
    variants = band_variants(8, n_remove=2)
    res = scan(tiny_llama, prompts, ScanConfig(block_size=8, map_size=8, token_match=True, variants=variants))
    base = res.heads
    for i, var in enumerate(variants):
        got = variant_token_scores(res, var.name)[0].numpy()  # [head, 3]
        with rope_intervention(tiny_llama, var, layers=[0]):
            direct = scan(tiny_llama, prompts, ScanConfig(block_size=8, map_size=8, token_match=True)).heads
        d0 = direct[direct["layer"] == 0]
        for k, col in enumerate(COLUMNS):
            np.testing.assert_allclose(got[:, k], d0[col].to_numpy(), atol=1e-9, err_msg=f"{var.name} {col}")
    assert not np.allclose(variant_token_scores(res, "wo_high")[0].numpy()[:, 0], base[base["layer"] == 0]["prev_token_score"])
