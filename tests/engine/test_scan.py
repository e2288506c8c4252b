"""The streaming scan equals the materialised-pattern computation, leaves the model's output
unchanged, and merges exactly."""

import numpy as np
import pytest
import torch

from interp.engine import kernels
from interp.attention import attention_pattern, expand_kv
from interp.hooks.capture import capture
from interp.engine import ScanConfig, ScanResult, merge_results, scan
from interp.engine.collector import Collector, new_state
from interp.models.taps import attention_taps
from interp.measures import Measure, cone, slash
from interp.measures.variants import variant_sink_weight
from tests.conftest import random_tokens


def _reference(model, prompts, map_size):
    """Everything from full patterns of the bridge's capture (independent of the block engine)."""
    c = model.card
    out = {"slash": [], "sink": [], "sink_pre": [], "maps": [], "cone_pre": [], "q_pre": [], "k_pre": []}
    for p in prompts:
        cap = capture(model, p, patterns=True)
        out["slash"].append(torch.stack([slash.slash_from_pattern(A) for A in cap.patterns]))
        out["sink"].append(torch.stack([A[:, :, 0].double().mean(-1) for A in cap.patterns]))
        pre = [attention_pattern(cap.q_pre[l], cap.k_pre[l], c.attn_scale[l], c.sliding_window[l], c.softcap) for l in range(c.n_layers)]
        out["sink_pre"].append(torch.stack([A[:, :, 0].double().mean(-1) for A in pre]))
        m = map_size
        out["maps"].append(torch.stack([torch.nn.functional.pad(A[:, :m, :m], (0, max(0, m - A.shape[-1]), 0, max(0, m - A.shape[-1]))) for A in cap.patterns]))
        out["cone_pre"].append(torch.stack([cone.cone_from_pairs(cap.q_pre[l], expand_kv(cap.k_pre[l], c.n_heads)) for l in range(c.n_layers)]))
        out["q_pre"].append(cap.q_pre)
        out["k_pre"].append(cap.k_pre)
    return out


@pytest.fixture(params=["fused-cpu", "python"])
def engine(request, monkeypatch):
    """Run a test with the fused kernel and with the Python block path (INTERP_KERNEL=0)."""
    if request.param == "python":
        monkeypatch.setenv("INTERP_KERNEL", "0")
    elif not kernels.available():
        pytest.skip("the fused kernel did not build on this machine (see the warning); the Python path is tested")
    return request.param


@pytest.mark.parametrize("n,block", [(29, 8), (40, 40), (37, 5), (64, 128)])
def test_scan_equals_materialised_patterns(tiny, n, block, engine):
    prompts = [random_tokens(n, seed=s) for s in range(2)]
    res = scan(tiny, prompts, ScanConfig(block_size=block, map_size=16))
    assert res.meta["engine"] == engine
    ref = _reference(tiny, prompts, 16)
    valid = n - slash.SKIP
    torch.testing.assert_close(res.scores[..., :valid], torch.stack(ref["slash"]).mean(0)[..., :valid], atol=1e-5, rtol=0)
    h = res.heads
    L, H = tiny.card.n_layers, tiny.card.n_heads
    np.testing.assert_allclose(h["sink_weight"].to_numpy().reshape(L, H), torch.stack(ref["sink"]).mean(0).numpy(), atol=1e-5)
    np.testing.assert_allclose(h["sink_weight_norope"].to_numpy().reshape(L, H), torch.stack(ref["sink_pre"]).mean(0).numpy(), atol=1e-5)
    torch.testing.assert_close(res.maps(), torch.stack(ref["maps"]).mean(0).double(), atol=1e-5, rtol=0)
    cones = torch.stack(ref["cone_pre"]).mean(0)  # [L, 4, H]
    for i, col in enumerate(["cos_qq_pre", "cos_kk_pre", "cos_qk_pre", "qk_angle_pre"]):
        np.testing.assert_allclose(h[col].to_numpy().reshape(L, H), cones[:, i].numpy(), atol=1e-4)
    # r1 of pre-RoPE Q from a numpy SVD of all tokens of all prompts
    for layer in range(L):
        x = torch.cat([q[layer] for q in ref["q_pre"]]).double().numpy()
        for head in range(H):
            s = np.linalg.svd(x[:, head], compute_uv=False) ** 2
            assert h.loc[(h.layer == layer) & (h["head"] == head), "r1_q"].item() == pytest.approx(s[0] / s.sum(), rel=1e-4)


def test_scan_leaves_the_model_output_unchanged(tiny, engine):
    toks = random_tokens(50, seed=4)[None]
    with torch.no_grad():
        ref = tiny.hf(toks).logits
        col = Collector(tiny.card, ScanConfig(block_size=16), new_state(tiny.card, 50, ScanConfig()))
        with attention_taps(tiny, col):
            got = tiny.hf(toks).logits
    torch.testing.assert_close(got, ref, atol=1e-4, rtol=1e-4)
    assert tiny.hf.config._attn_implementation == "sdpa"  # restored


def test_merge_rejects_other_settings(tiny_llama):
    a = scan(tiny_llama, [random_tokens(20)], ScanConfig(map_size=8))
    b = scan(tiny_llama, [random_tokens(20)], ScanConfig(map_size=8, kappa=0.2))
    with pytest.raises(ValueError, match="different settings"):
        merge_results([a, b])


def test_long_range_lags_and_ood_ratio(tiny_llama):
    from interp.measures.slash import add_ood

    cfg = ScanConfig(block_size=64, long_lags=(20, 60), long_min_entries=50, map_size=8)
    text = scan(tiny_llama, [random_tokens(100, seed=1)], cfg)
    ood = scan(tiny_llama, [random_tokens(100, seed=2)], cfg)
    assert text.long_lag_range() == range(20, 47)  # lag 46 is the last with 100 - 46 - 4 = 50 entries
    h = add_ood(text.heads, ood)
    s = text.scores
    best = s[..., 20:47].max(-1)
    np.testing.assert_allclose(h["long_slash_score"].to_numpy(), best.values.reshape(-1).numpy())
    assert (h["is_sdh_long"] == (h["long_slash_score"] >= 1e-3)).all()
    r = h.iloc[0]
    assert r.ood_ratio == pytest.approx(ood.scores[0, 0, int(r.slash_delta)].item() / r.slash_score)
    for r in h[h["long_slash_delta"].notna()].itertuples():  # 004 Table 6: OOD score at the consistent long lag
        assert r.long_ood_slash_score == pytest.approx(ood.scores[r.layer, r.head, int(r.long_slash_delta)].item())


def test_slash_table_is_tidy(tiny_llama):
    res = scan(tiny_llama, [random_tokens(30)], ScanConfig(map_size=8))
    t = res.slash_table()
    assert list(t.columns) == ["layer", "head", "delta", "slash_score"]
    assert len(t) == tiny_llama.card.n_layers * tiny_llama.card.n_heads * 5
    r = t.iloc[7]
    assert r.slash_score == pytest.approx(res.scores[int(r.layer), int(r["head"]), int(r.delta)].item())
    assert set(res.slash_table([0, 20])["delta"]) == {0, 20}


def test_scan_without_counterfactual_matches_the_full_scan(tiny_llama, engine):
    prompts = [random_tokens(40, seed=7)]
    full = scan(tiny_llama, prompts, ScanConfig(block_size=16)).heads
    lean = scan(tiny_llama, prompts, ScanConfig(block_size=16, counterfactual_sinks=False)).heads
    assert lean["sink_weight_norope"].isna().all()
    np.testing.assert_allclose(lean["sink_weight"], full["sink_weight"], atol=1e-6)
    np.testing.assert_allclose(lean["slash_score"], full["slash_score"], atol=1e-6)


def test_counterfactual_variants_equal_a_materialised_recomputation(tiny, engine):
    """Issue 7, item 2: band ablation inside the streaming engine equals rotating the captured pre-RoPE q/k with
    the variant and materialising the pattern; the identity variant reproduces the model's own scores."""
    from interp.models.arch import rope_specs
    from interp.rope import RopeVariant, band_ablations, rotate_variant

    c = tiny.card
    variants = band_ablations(c.d_head // 2, n_remove=2) + (RopeVariant("identity"),)
    prompts = [random_tokens(n, seed=s) for s, n in ((0, 45), (1, 33))]
    res = scan(tiny, prompts, ScanConfig(block_size=8, map_size=8, variants=variants))
    specs = rope_specs(tiny.hf)
    for vi, var in enumerate(variants):
        ref_slash, ref_sink = [], []
        for p in prompts:
            cap = capture(tiny, p)
            pos = torch.arange(p.numel())
            pats = [attention_pattern(rotate_variant(cap.q_pre[l], pos, specs[l], var), rotate_variant(cap.k_pre[l], pos, specs[l], var),
                                      c.attn_scale[l], c.sliding_window[l], c.softcap) for l in range(c.n_layers)]
            ref_slash.append(torch.nn.functional.pad(torch.stack([slash.slash_from_pattern(A) for A in pats]), (0, 45 - p.numel()), value=torch.nan))
            ref_sink.append(torch.stack([A[:, :, 0].double().mean(-1) for A in pats]))
        got = res.variant_scores(var.name)
        want = torch.stack(ref_slash).nanmean(0)
        torch.testing.assert_close(got[..., : 33 - slash.SKIP], want[..., : 33 - slash.SKIP], atol=1e-5, rtol=0)
        torch.testing.assert_close(variant_sink_weight(res, var.name), torch.stack(ref_sink).mean(0), atol=1e-5, rtol=0)
    torch.testing.assert_close(res.variant_scores("identity")[..., :29], res.scores[..., :29], atol=1e-5, rtol=0)
    assert not torch.allclose(res.variant_scores("wo_high")[..., :29], res.scores[..., :29], atol=1e-3)  # the ablation changes something


def test_unknown_variant_is_named(tiny_llama):
    from interp.rope import band_ablations

    res = scan(tiny_llama, [random_tokens(20)], ScanConfig(map_size=8, variants=band_ablations(8)))
    with pytest.raises(KeyError, match="no counterfactual variant 'wo_ultra'"):
        res.variant_scores("wo_ultra")


def test_inp_sums_in_the_scan_equal_the_pairwise_definition(tiny, engine):
    """Issue 7, item 1: the scan's per-plane InP accumulator (signed and |.|, visible pairs, keys >= 4) equals the
    plane-wise products of the captured post-RoPE q/k summed pair by pair, averaged over prompts."""
    from interp.rope import plane_channels
    from interp.measures.inp import spectrum_table as inp_spectrum

    c = tiny.card
    prompts = [random_tokens(n, seed=s) for s, n in ((3, 41), (4, 30))]
    res = scan(tiny, prompts, ScanConfig(block_size=8, map_size=8, inp=True))
    ch = plane_channels(c.d_head, c.pairing)
    signed = torch.zeros(c.n_layers, c.n_heads, c.d_head // 2, dtype=torch.float64)
    absol, pairs = torch.zeros_like(signed), torch.zeros(c.n_layers, c.n_heads, dtype=torch.float64)
    for p in prompts:
        cap = capture(tiny, p)
        N = p.numel()
        i, j = torch.arange(N)[:, None], torch.arange(N)[None, :]
        for l in range(c.n_layers):
            w = c.sliding_window[l]
            ok = (j <= i) & (j >= slash.SKIP) & ((i - j < w) if w else True)
            q, k = cap.q_rot[l].double(), expand_kv(cap.k_rot[l], c.n_heads).double()
            prod = torch.einsum("ihf,jhf->hijf", q[..., ch[:, 0]], k[..., ch[:, 0]]) + torch.einsum("ihf,jhf->hijf", q[..., ch[:, 1]], k[..., ch[:, 1]])
            prod = prod * ok[None, :, :, None]
            signed[l] += prod.sum((1, 2))
            absol[l] += prod.abs().sum((1, 2))
            pairs[l] += ok.sum()
    torch.testing.assert_close(res.state["inp_signed"], signed, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(res.state["inp_abs"], absol, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(res.state["inp_pairs"], pairs)
    spec = inp_spectrum(res)
    assert len(spec) == c.n_layers * c.n_heads * c.d_head // 2
    r = spec.iloc[5]
    assert r.mean_abs_inp == pytest.approx((absol / pairs[..., None])[int(r.layer), int(r["head"]), int(r.freq)].item(), rel=1e-4)
    h = res.heads
    assert (h["inp_active_abs"] == h["inp_active_high"] + h["inp_active_medium"] + h["inp_active_low"]).all()
    assert (h["inp_active_abs"] >= 1).all()


def test_inp_query_map_sums_to_the_logits(tiny_llama):
    """The scan's Fig. 7 map: summed over planes and times the scale it is the query's logit row (one prompt)."""
    p = random_tokens(30, seed=8)
    res = scan(tiny_llama, [p], ScanConfig(block_size=8, map_size=16, inp=True))
    cap = capture(tiny_llama, p)
    c = tiny_llama.card
    for l in range(c.n_layers):
        logits = torch.einsum("hd,jhd->hj", cap.q_rot[l][15].double(), expand_kv(cap.k_rot[l], c.n_heads)[:16].double())
        torch.testing.assert_close(res.inp_query_map()[l].sum(-1), logits, atol=1e-4, rtol=1e-4)


# The bounds the tests enforce for reduced-precision scans of the 2-3 layer tiny models (they reach about
# a third of them). Deep models accumulate more error: the README lists what
# analyses/benchmarks/dtype_error.py measures on the zoo models (e.g. SmolLM2, bf16: slash 3e-3, r1 8e-4).
DTYPE_BOUNDS = {"bfloat16": {"slash": 1e-3, "r1": 1e-2}, "float16": {"slash": 2e-4, "r1": 2e-3}}


@pytest.mark.parametrize("dtype", list(DTYPE_BOUNDS))
@pytest.mark.parametrize("name", ["tiny-llama", "tiny-gemma2", "tiny-neox"])
def test_reduced_precision_scans_stay_within_the_stated_bounds(name, dtype):
    """A bf16 / fp16 model scans in float32 on its own activations; slash scores and r1 move by less than the bound."""
    from interp import load_model

    prompts = [random_tokens(96, seed=s) for s in range(3)]
    ref = scan(load_model(name, device="cpu"), prompts, ScanConfig(block_size=16, full_profile=True))
    low = load_model(name, device="cpu", dtype=dtype)
    assert low.card.dtype == dtype
    got = scan(low, prompts, ScanConfig(block_size=16, full_profile=True))
    assert all(v.dtype == torch.float64 for v in got.state.values())
    valid = 96 - slash.SKIP
    assert (got.scores[..., :valid] - ref.scores[..., :valid]).abs().max() < DTYPE_BOUNDS[dtype]["slash"]
    for col in ("r1_q", "r1_k"):
        assert (got.heads[col] - ref.heads[col]).abs().max() < DTYPE_BOUNDS[dtype]["r1"]


def test_non_finite_queries_are_named_not_summed(tiny_llama):
    """An overflow (e.g. float16 activations of a bf16-trained model) stops the scan with one clear error."""
    from interp.errors import NumericsError

    with torch.no_grad():
        saved = tiny_llama.hf.model.layers[1].self_attn.q_proj.weight.clone()
        tiny_llama.hf.model.layers[1].self_attn.q_proj.weight[0, 0] = float("inf")
    try:
        with pytest.raises(NumericsError, match="layer 1 produced non-finite queries"):
            scan(tiny_llama, [random_tokens(20)])
    finally:
        with torch.no_grad():
            tiny_llama.hf.model.layers[1].self_attn.q_proj.weight.copy_(saved)


def test_merge_refuses_a_shard_given_twice(tiny_llama, tmp_path):
    """Shard ids are kept in the merged meta, and a prompt that two inputs hold is refused (no double counting)."""
    from typer.testing import CliRunner

    from interp.cli import app

    args = ["scan", "tiny-llama", "--prompts", "3", "--tokens", "32", "--corpus", "random"]
    for i in range(2):
        assert CliRunner().invoke(app, args + ["--shard", f"{i}/2", "--out", str(tmp_path / f"s{i}")]).exit_code == 0
    merged = merge_results([ScanResult.load(tmp_path / f"s{i}" / "state") for i in range(2)])
    assert merged.meta["shards"] == ["0/2", "1/2"] and sorted(merged.meta["prompt_ids"]) == [0, 1, 2]
    with pytest.raises(ValueError, match="count it twice"):
        merge_results([merged, ScanResult.load(tmp_path / "s1" / "state")])
    res = CliRunner().invoke(app, ["merge", str(tmp_path / "s0"), str(tmp_path / "s1"), str(tmp_path / "s1"), "--out", str(tmp_path / "m")])
    assert res.exit_code == 2 and "count it twice" in res.output


class _VariantProbe(Measure):
    """A measure as a plugin would write it: it asks every counterfactual pass for row products (``variant_products``)
    and keeps what it got; no state, no columns."""

    name, products, variant_products = "variant_probe", ("variants",), ("key_mass", "entropy", "lse")

    def __init__(self):
        self.seen = []

    def columns(self, cfg):
        return []

    def entries(self, dims, cfg):
        return []

    def update(self, x):
        self.seen.append((x.layer, [{k: v.clone() for k, v in p.items()} for p in x.products["variants"]]))
        return {}


def test_a_measure_gets_the_variant_products_it_declares(tiny, engine, monkeypatch):
    """Growing the toolkit: a measure that declares ``variant_products`` reads them from each counterfactual pass, with
    no engine edit; each equals the product computed from the materialised pattern of the variant's rotation."""
    from interp.measures import REGISTRY
    from interp.models.arch import rope_specs
    from interp.rope import band_ablations, rotate_variant

    probe, enabled = _VariantProbe(), REGISTRY.enabled
    monkeypatch.setattr(REGISTRY, "enabled", lambda cfg: enabled(cfg) + [probe])
    c, p = tiny.card, random_tokens(37, seed=3)
    variants = band_ablations(c.d_head // 2, n_remove=2)
    scan(tiny, [p], ScanConfig(block_size=8, map_size=8, variants=variants))
    cap, pos, specs = capture(tiny, p), torch.arange(p.numel()), rope_specs(tiny.hf)
    assert [layer for layer, _ in probe.seen] == list(range(c.n_layers))
    for layer, per_variant in probe.seen:
        assert len(per_variant) == len(variants)
        for var, got in zip(variants, per_variant):
            assert set(got) == {"lag", "key0", "key_mass", "entropy", "lse"}
            A = attention_pattern(rotate_variant(cap.q_pre[layer], pos, specs[layer], var),
                                  rotate_variant(cap.k_pre[layer], pos, specs[layer], var),
                                  c.attn_scale[layer], c.sliding_window[layer], c.softcap).double()  # [head, pos, pos]
            torch.testing.assert_close(got["key_mass"], A.sum(1), atol=1e-5, rtol=0)
            torch.testing.assert_close(got["key0"].double(), A[:, :, 0], atol=1e-6, rtol=0)
            ent = -(A * torch.where(A > 0, A.log(), torch.zeros_like(A))).sum(-1)  # [head, pos]
            torch.testing.assert_close(got["entropy"][:, 0], ent.sum(-1), atol=1e-4, rtol=0)


def test_unknown_variant_products_are_refused_at_registration():
    from interp.measures import Registry, RegistryError

    class Bad(Measure):
        name, products, variant_products = "bad_variant_reader", ("variants",), ("map",)

    with pytest.raises(RegistryError, match=r"asks counterfactual passes for \['map'\]"):
        Registry().register(Bad())
