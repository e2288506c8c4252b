"""RoPE variants (issue 7, item 4) and the point-cloud ratios of paper 001 Fig. 7 (item 5).

Each variant is checked against an independent statement of its definition: transformers' own
functions (PI, YaRN), the paper's code (RoPE-ID), the paper's recursion (2D-RoPE), position identities
(scaled, shuffled, partial). The cloud ratios are checked against closed forms with tolerances derived
from Weyl's inequality (paper 001, proof of Lemma 1), not tuned.
"""

import math

import numpy as np
import pytest
import torch
from transformers import LlamaConfig
from transformers.modeling_rope_utils import _compute_linear_scaling_rope_parameters, _compute_yarn_parameters

from interp.hooks.capture import capture
from interp.models.arch import rope_specs
from interp.rope import (PlaneAblation, RopeSpec, RopeVariant, default_inv_freq, rotate, rotate_variant, variant_from_dict,
                         variant_to_dict)
from interp.rope.variants import (PRope, PartialRope, PositionInterpolation, Rope2D, RopeID, ScaledRope, ShuffledRope, Yarn, fit_base,
                                  positions_2d, variant_frequencies)
from interp.rope.clouds import cloud_ratios, ones_cloud_limit, rank1_rotated_gram, rotate64
from tests.conftest import random_tokens

D = 128
SPEC = RopeSpec(default_inv_freq(1e4, D))


def _x(n=50, heads=2, d=D, seed=0):
    return torch.randn(n, heads, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


# ---------------------------------------------------------------- PI and YaRN against transformers


@pytest.mark.parametrize("base,d,factor,L", [(1e4, 128, 4.0, 4096), (1e6, 64, 8.0, 2048), (1e5, 256, 2.5, 8192)])
def test_yarn_and_pi_match_transformers(base, d, factor, L):
    spec = RopeSpec(default_inv_freq(base, d))
    cfg = LlamaConfig(hidden_size=2 * d, num_attention_heads=2, head_dim=d, max_position_embeddings=int(factor * L),
                      rope_parameters={"rope_type": "yarn", "rope_theta": base, "factor": factor, "original_max_position_embeddings": L})
    inv, att = _compute_yarn_parameters(cfg, "cpu")
    y = Yarn(factor, L)
    # transformers computes in float32: agreement to a few float32 ulps (eps 1.2e-7), base fitted or given
    torch.testing.assert_close(y.frequencies(spec), inv.double(), rtol=4e-7, atol=0)
    torch.testing.assert_close(Yarn(factor, L, rope_theta=base).frequencies(spec), inv.double(), rtol=4e-7, atol=0)
    assert y.attention_factor == pytest.approx(att, rel=1e-12)
    assert y.logit_scale(123) == pytest.approx(att**2, rel=1e-12)
    cfg = LlamaConfig(hidden_size=2 * d, num_attention_heads=2, head_dim=d, rope_parameters={"rope_type": "linear", "rope_theta": base, "factor": factor})
    inv, att = _compute_linear_scaling_rope_parameters(cfg, "cpu")
    torch.testing.assert_close(PositionInterpolation(factor).frequencies(spec), inv.double(), rtol=4e-7, atol=0)
    assert att == 1.0 and PositionInterpolation(factor).logit_scale(10**6) == 1.0


def test_yarn_logits_equal_a_model_built_with_yarn():
    """A Llama built with rope_type yarn: its cos/sin (times attention_scaling) give the same q.k logits as
    the default layer rotated by the Yarn variant, times logit_scale."""
    from transformers import LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=32, hidden_size=64, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,
                      head_dim=32, max_position_embeddings=8192,
                      rope_parameters={"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0, "original_max_position_embeddings": 2048})
    hf_spec = rope_specs(LlamaForCausalLM(cfg))[0]
    y = Yarn(4.0, 2048)
    default = RopeSpec(default_inv_freq(1e4, 32))
    torch.testing.assert_close(y.frequencies(default).float(), hf_spec.inv_freq, rtol=4e-7, atol=0)
    assert hf_spec.scaling == pytest.approx(y.attention_factor)
    q, k = _x(60, 1, 32, seed=1), _x(60, 1, 32, seed=2)
    pos = torch.arange(60) * 97  # long range, where YaRN interpolates
    ref = rotate(q, pos, hf_spec)[:, 0] @ rotate(k, pos, hf_spec)[:, 0].T
    got = (rotate_variant(q, pos, default, y)[:, 0] @ rotate_variant(k, pos, default, y)[:, 0].T) * y.logit_scale(60)
    torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-3)


def test_fit_base_recovers_base_and_rejects_scaled_spectra():
    for base, d in [(1e4, 16), (1e5, 64), (1e6, 256)]:
        assert fit_base(RopeSpec(default_inv_freq(base, d))) == pytest.approx(base, rel=1e-6)
    with pytest.raises(ValueError, match="rope_theta"):
        PositionInterpolation(2.0).frequencies(RopeSpec(default_inv_freq(1e4, 64) / 8))
    # with the base given, a scaled layer is fine (the variant replaces its frequencies)
    f = PositionInterpolation(2.0, rope_theta=1e4).frequencies(RopeSpec(default_inv_freq(1e4, 64) / 8))
    torch.testing.assert_close(f, default_inv_freq(1e4, 64).double() / 2, rtol=1e-6, atol=0)


# ---------------------------------------------------------------- RoPE-ID against the paper's code


def _paper_rope_id_apply(x, pos):
    """Paper 001, App. A.4, Codeblocks 2 and 3, transcribed: frequencies for dim = d/2, RoPE on quarters 1 and 3."""
    d = x.shape[-1]
    dim = d // 2
    logstart, logend = math.log(2 * math.pi / 32), math.log(4 * math.pi / 4096)
    p = torch.arange(0, dim // 2, dtype=torch.float64) / (dim // 2 - 1)
    inv_freq = torch.exp(p * (logend - logstart) + logstart)
    emb = pos.double()[:, None] * inv_freq[None, :]
    emb = torch.cat([emb, emb], dim=-1)
    cos, sin = emb.cos()[:, None, :], emb.sin()[:, None, :]
    q1, q2, q3, q4 = torch.split(x, d // 4, dim=-1)
    rot = torch.cat([q1, q3], dim=-1)
    half = rot.shape[-1] // 2
    rotate_half = torch.cat([-rot[..., half:], rot[..., :half]], dim=-1)
    out = rot * cos + rotate_half * sin
    o1, o3 = torch.split(out, d // 4, dim=-1)
    return torch.cat([o1, q2, o3, q4], dim=-1)


def test_rope_id_equals_the_papers_code_and_temperature():
    x, pos = _x(40, 2, D), torch.arange(40) * 37
    got = rotate64(x, pos.double()[:, None] * RopeID().frequencies(SPEC)[None, :], "rotate_half")
    torch.testing.assert_close(got, _paper_rope_id_apply(x, pos), rtol=1e-9, atol=1e-9)
    w = 2 * math.pi / RopeID().frequencies(SPEC)[:32]
    assert float(w[0]) == pytest.approx(32) and float(w[-1]) == pytest.approx(2048)
    assert (RopeID().frequencies(SPEC)[32:] == 0).all()
    r = RopeID()
    assert r.logit_scale(1) == 1.0 and r.logit_scale(4096) == 1.0  # no change within the training length
    assert r.logit_scale(8192) == pytest.approx((0.1 * math.log(2) + 1) ** 2)
    # the same temperature as YaRN's attention factor squared at factor n / 4096 (the paper borrows it)
    for n in (5000, 16384, 10**6):
        assert r.logit_scale(n) == pytest.approx(Yarn(n / 4096).attention_factor ** 2, rel=1e-12)


# ---------------------------------------------------------------- partial / p-RoPE / scaled / shuffled


def test_partial_prope_scaled_shuffled_definitions():
    f = SPEC.inv_freq.double()
    pr = PartialRope(0.25).frequencies(SPEC)
    assert (pr[:16] == f[:16]).all() and (pr[16:] == 0).all()
    torch.testing.assert_close(PRope(0.25).frequencies(SPEC), PartialRope(0.75).frequencies(SPEC))
    assert PRope(0.25).p == 0.75 and (PRope(0.25).frequencies(SPEC)[48:] == 0).all()
    x, pos = _x(30, 2, D), torch.arange(30) * 11
    torch.testing.assert_close(rotate_variant(x, pos, SPEC, PartialRope(1.0)), rotate(x, pos, SPEC))
    torch.testing.assert_close(rotate_variant(x, pos, SPEC, PartialRope(0.0)), x)
    # scaling every frequency by 3 is the same as tripling the positions
    f3 = ScaledRope(3.0).frequencies(SPEC)
    torch.testing.assert_close(rotate64(x, pos.double()[:, None] * f3[None], "rotate_half"),
                               rotate64(x, (3 * pos).double()[:, None] * f[None], "rotate_half"), rtol=1e-9, atol=1e-9)
    # through the float32 angles of the model path: angles up to ~900 rad carry float32 ulps of 6e-5 rad
    torch.testing.assert_close(rotate_variant(x, pos, SPEC, ScaledRope(3.0)), rotate(x, 3 * pos, SPEC), rtol=0, atol=2e-3)
    s = ShuffledRope(0).frequencies(SPEC)
    assert torch.equal(s.sort().values, f.sort().values) and not torch.equal(s, f)
    assert torch.equal(s, ShuffledRope(0).frequencies(SPEC)) and not torch.equal(s, ShuffledRope(1).frequencies(SPEC))
    # plane norms are kept by every variant (rotations)
    for v in (PartialRope(0.5), PRope(0.25), RopeID(), PositionInterpolation(4), Yarn(4, 4096), ScaledRope(0.5), ShuffledRope(2)):
        y = rotate_variant(x, pos, SPEC, v)
        torch.testing.assert_close(y.norm(dim=-1), x.norm(dim=-1))


def test_variant_frequencies_of_base_classes_and_linearity():
    torch.testing.assert_close(variant_frequencies(RopeVariant(), SPEC), SPEC.inv_freq.double())
    f = variant_frequencies(PlaneAblation("a", (0, 5)), SPEC)
    assert f[0] == 0 and f[5] == 0 and f[1] == SPEC.inv_freq[1]
    with pytest.raises(ValueError, match="tokens"):
        variant_frequencies(Rope2D((10,)), SPEC)


# ---------------------------------------------------------------- 2D-RoPE


def test_positions_2d_follow_the_papers_recursion():
    nl = 9
    toks = torch.tensor([5, 6, nl, 7, nl, nl, 8, 8, 8])
    rc = positions_2d(toks, [nl])
    assert rc.tolist() == [[0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [2, 0], [3, 0], [3, 1], [3, 2]]
    # the recursion of paper 000 Sec. 4.1, evaluated step by step
    g = torch.Generator().manual_seed(0)
    toks = torch.randint(0, 5, (300,), generator=g)
    r, c, ref = 0, 0, [(0, 0)]
    for i in range(1, 300):
        r, c = (r + 1, 0) if int(toks[i - 1]) in (0, 3) else (r, c + 1)
        ref.append((r, c))
    assert positions_2d(toks, (0, 3)).tolist() == [list(t) for t in ref]


def test_rope2d_rows_then_columns_with_shared_frequencies():
    nl = 1
    toks = torch.tensor([2, 2, 2, nl, 2, 2, nl, 2, 2, 2, 2])
    v = Rope2D((nl,))
    ang = v.angles(SPEC, torch.arange(toks.numel()), toks).double()
    rc = positions_2d(toks, (nl,)).double()
    beta = SPEC.inv_freq.double()[0::2]
    torch.testing.assert_close(ang[:, :32], rc[:, :1] * beta[None], rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(ang[:, 32:], rc[:, 1:] * beta[None], rtol=1e-6, atol=1e-6)
    # logits depend on (row, column) offsets only, not on the 1D lag
    x = _x(toks.numel(), 1, D, seed=4)
    pos = torch.arange(toks.numel())
    qr = rotate_variant(x[0].expand_as(x).clone(), pos, SPEC, v, toks)  # the same q and k at every position
    kr = rotate_variant(x[1].expand_as(x).clone(), pos, SPEC, v, toks)
    dot = lambda i, j: float((qr[i, 0] * kr[j, 0]).sum())  # noqa: E731
    assert dot(4, 0) == pytest.approx(dot(7, 4), rel=1e-5)  # offset (1, 0) at 1D lags 4 and 3
    assert dot(5, 0) == pytest.approx(dot(9, 5), rel=1e-5)  # offset (1, 1) at 1D lags 5 and 4
    assert abs(dot(4, 0) - dot(4, 1)) > 1e-3  # offset (1, 0) vs (1, -1): different
    with pytest.raises(ValueError, match="tokens"):
        v.angles(SPEC, torch.arange(5))
    with pytest.raises(ValueError, match="even"):
        v.angles(RopeSpec(default_inv_freq(1e4, 6)), torch.arange(3), torch.tensor([1, 2, 3]))


# ---------------------------------------------------------------- errors, names, serialisation


@pytest.mark.parametrize("make", [lambda: PartialRope(1.5), lambda: PartialRope(-0.1), lambda: PRope(2), lambda: RopeID(fraction=0),
                                  lambda: RopeID(min_wavelength=64, max_wavelength=32), lambda: PositionInterpolation(0.5),
                                  lambda: Yarn(0.5), lambda: Yarn(4, 0), lambda: Yarn(4, 4096, beta_fast=1, beta_slow=32),
                                  lambda: ScaledRope(0), lambda: ScaledRope(float("nan")), lambda: ShuffledRope(-1), lambda: Rope2D(()),
                                  lambda: Yarn(4, 4096, rope_theta=0.5)])
def test_bad_arguments_raise_value_error(make):
    with pytest.raises(ValueError):
        make()


def test_rope_id_needs_two_planes():
    with pytest.raises(ValueError, match="2 rotated planes"):
        RopeID().frequencies(RopeSpec(default_inv_freq(1e4, 4)))


def test_names_and_dict_round_trip():
    vs = [PartialRope(0.5), PRope(0.25), RopeID(), PositionInterpolation(4), Yarn(4, 4096), ScaledRope(2), ShuffledRope(3), Rope2D((10, 11)),
          PartialRope(0.5, name="half")]
    assert [v.name for v in vs] == ["partial0.5", "prope_drop0.25", "rope_id", "pi4", "yarn4", "scaled2", "shuffled3", "rope2d", "half"]
    for v in vs:
        back = variant_from_dict(variant_to_dict(v))
        assert back == v and hash(back) == hash(v)


def test_variants_run_in_the_scan(tiny_llama):
    """Through the streaming scan: PartialRope(1) must reproduce the model's own slash scores exactly; the others run."""
    import interp

    toks = random_tokens(64, seed=5)[None]
    nl = (int(toks[0, 10]),)
    cfg = interp.ScanConfig(variants=(PartialRope(1.0), RopeID(), Yarn(4, 128), Rope2D(nl)))
    res = interp.scan(tiny_llama, toks, cfg)
    torch.testing.assert_close(res.variant_scores("partial1"), res.scores, rtol=1e-5, atol=1e-6, equal_nan=True)
    for name in ("rope_id", "yarn4", "rope2d"):
        assert torch.isfinite(res.variant_scores(name)[..., 5:60]).all()


# ---------------------------------------------------------------- cloud ratios (paper 001 Fig. 7)


def _weyl_bound(freq: torch.Tensor, n: int) -> float:
    """Upper bound on ||E||_2 for the all-ones cloud, G = D + E (paper 001, proof of Lemma 1, with u = 1).

    D: n I_2 on each rotating plane and n 1 1^T on the unrotated planes (exact). E's (k, l) block is
    (A(2 S(w_k - w_l)) [k != l, not both unrotated] + B(2i S(w_k + w_l)) [not both unrotated]) / 2 with
    |S(delta)| <= min(n, 1 / |sin(delta / 2)|) (geometric series) and ||A(c)||_F = ||B(c)||_F = sqrt(2)|c|.
    The slow planes dominate: adjacent low frequencies give the smallest w_k - w_l.
    """
    w = freq.double()
    n_f = w.numel()

    def sb(delta):
        s = torch.sin(delta / 2).abs()
        return torch.where(s == 0, torch.full_like(s, float(n)), torch.minimum(torch.full_like(s, float(n)), 1 / s.clamp(min=1e-300)))

    frozen = (w == 0)
    both = frozen[:, None] & frozen[None, :]
    off = ~torch.eye(n_f, dtype=torch.bool)
    blk = math.sqrt(2) * (torch.where(off & ~both, sb(w[:, None] - w[None, :]), 0) + torch.where(~both, sb(w[:, None] + w[None, :]), 0))
    return float(blk.pow(2).sum().sqrt())


def test_closed_form_equals_explicit_rotation():
    ns = [1, 2, 7, 100, 1000, 3000]
    for v in (RopeVariant(), RopeID(), Yarn(4, 4096), ShuffledRope(1)):
        a, b = cloud_ratios(v, SPEC, ns), cloud_ratios(v, SPEC, ns, closed_form=True)
        np.testing.assert_allclose(a["fsv_ratio"], b["fsv_ratio"], rtol=1e-10)
        np.testing.assert_allclose(a["srank_ratio"], b["srank_ratio"], rtol=1e-9)
    g = torch.Generator().manual_seed(0)
    vec = torch.randn(D, generator=g, dtype=torch.float64)
    x = vec.expand(500, 1, D)
    xr = rotate64(x, torch.arange(500).double()[:, None] * SPEC.inv_freq.double()[None], "rotate_half")[:, 0]
    torch.testing.assert_close(rank1_rotated_gram(vec, SPEC.inv_freq, 500), xr.T @ xr, rtol=1e-10, atol=1e-9)
    spec_i = RopeSpec(default_inv_freq(1e4, 16), pairing="interleaved")
    xi = rotate64(vec[:16].expand(50, 1, 16), torch.arange(50).double()[:, None] * spec_i.inv_freq.double()[None], "interleaved")[:, 0]
    torch.testing.assert_close(rank1_rotated_gram(vec[:16], spec_i.inv_freq, 50, "interleaved"), xi.T @ xi, rtol=1e-10, atol=1e-9)


def test_full_rope_fsv_ratio_falls_to_one_over_sqrt_d():
    """Lemma 1 with the all-ones cloud: every alpha_k = sqrt(2/d), so ||R(X)||/||X|| -> 1/sqrt(128), srank ratio -> 128.

    The slowest plane of base 1e4 turns once per 2 pi / 1e4**(-126/128) = 54,400 tokens, so at the lengths of
    Fig. 7 the ratio is far above the limit; the tolerance at large n is Weyl's bound from ``_weyl_bound``.
    """
    ns = [4**k for k in range(16)]  # 1 .. 2**30
    df = cloud_ratios(RopeVariant(), SPEC, ns, closed_form=True)
    r = df["fsv_ratio"].to_numpy()
    assert r[0] == pytest.approx(1.0, abs=1e-12) and df["srank_ratio"].iloc[0] == pytest.approx(1.0)
    assert (np.diff(r) < 0).all()  # falls at every step of 4x
    for n, ratio in zip(ns, r):
        if n < 2**20:
            continue
        eps = _weyl_bound(SPEC.inv_freq, n)
        lo, hi = math.sqrt(max(n - eps, 0) / (n * D)), math.sqrt((n + eps) / (n * D))
        assert lo <= ratio <= hi, (n, lo, ratio, hi)
    assert abs(r[-1] - 1 / math.sqrt(D)) < 3e-4  # the bound at n = 2**30 is +-2.5e-5 around 0.0884
    assert df["srank_ratio"].iloc[-1] == pytest.approx(D, rel=1e-3)
    # at n = 4096 the slow planes have barely turned: Jensen's bound from the mean row (G/n >= m m^T) keeps it high
    n = 4096
    w = SPEC.inv_freq.double()
    c = (torch.sin(n * w / 2) / (n * torch.sin(w / 2))).abs()  # |mean_j exp(i j w_k)|
    mean_bound = math.sqrt(float((2 / D) * (c**2).sum()))
    r4096 = float(cloud_ratios(RopeVariant(), SPEC, [n])["fsv_ratio"].iloc[0])
    assert r4096 >= mean_bound - 1e-12 and mean_bound > 0.3  # far from 0.088: 19 planes have not turned once


@pytest.mark.parametrize("variant", [RopeID(), PartialRope(0.5)])
def test_half_plane_variants_fall_to_one_over_sqrt_2(variant):
    """Half the planes unrotated: they stay coherent (||.||^2 = n d/2), so FSV ratio -> 1/sqrt 2 and srank ratio -> 2."""
    lim = ones_cloud_limit(variant, SPEC)
    assert lim["fsv_ratio"] == pytest.approx(1 / math.sqrt(2)) and lim["srank_ratio"] == pytest.approx(2.0)
    f = variant_frequencies(variant, SPEC)
    for n in (2**16, 2**20):
        ratio = float(cloud_ratios(variant, SPEC, [n], closed_form=True)["fsv_ratio"].iloc[0])
        eps = _weyl_bound(f, n)
        top = n * D / 2  # the unrotated block's eigenvalue, far above the rotating planes' n
        assert math.sqrt((top - eps) / (n * D)) <= ratio <= math.sqrt((top + eps) / (n * D))  # +-3.3e-3 at 2**16
    # RoPE-ID's slowest plane turns twice in 4096 tokens: flat beyond the training length (Fig. 7, red), where
    # full RoPE (blue) keeps falling; "flat" = a change below 1 % of full RoPE's over 4096 -> 16384
    ns = [4096, 8192, 16384]
    rid = cloud_ratios(RopeID(), SPEC, ns)["fsv_ratio"].to_numpy()
    full = cloud_ratios(RopeVariant(), SPEC, ns)["fsv_ratio"].to_numpy()
    assert np.ptp(rid) < 0.01 * (full[0] - full[-1])


def test_cloud_ratios_on_captured_keys_match_the_models_own_rotation(tiny):
    """The real pre-RoPE key cloud of a model: R(X) by the layer's RopeSpec must give the spectrum of the captured post-RoPE keys."""
    cap = capture(tiny, random_tokens(48, seed=7))
    spec = rope_specs(tiny.hf)[0]
    df = cloud_ratios(RopeVariant(), spec, [1, 10, 48], cloud=cap.k_pre[0])
    last = df[df["n"] == 48]
    for h in range(cap.k_pre[0].shape[1]):
        pre = np.linalg.svd(cap.k_pre[0][:, h].double().numpy(), compute_uv=False)
        rot = np.linalg.svd(cap.k_rot[0][:, h].double().numpy(), compute_uv=False)
        row = last[last["head"] == h].iloc[0]
        assert row["fsv_ratio"] == pytest.approx(rot[0] / pre[0], rel=1e-4)
        assert row["srank_ratio"] == pytest.approx(((rot**2).sum() / rot[0] ** 2) / ((pre**2).sum() / pre[0] ** 2), rel=1e-4)
    assert np.allclose(df[df["n"] == 1]["fsv_ratio"], 1.0)  # position 0 is not rotated
    with pytest.raises(ValueError, match="rows"):
        cloud_ratios(RopeVariant(), spec, [49], cloud=cap.k_pre[0])
    with pytest.raises(ValueError, match="closed_form"):
        cloud_ratios(RopeVariant(), spec, [4], cloud=cap.k_pre[0], closed_form=True)


# ---------------------------------------------------------------- the Fig. 7 script in quick mode


@pytest.mark.slow
def test_quick_fig7_script(tmp_path):
    import importlib.util
    from pathlib import Path

    from interp.models import is_installed

    if not is_installed("smollm2-135m"):
        pytest.skip("smollm2-135m not installed")
    path = Path(__file__).resolve().parents[2] / "analyses" / "p001_frayed/rope_variants_fig7.py"
    spec = importlib.util.spec_from_file_location("rope_variants_fig7", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = mod.main(["--quick", "--out", str(tmp_path)])
    ones = out["ones"]
    assert np.allclose(ones[ones["n"] == 1]["fsv_ratio"], 1.0) and np.allclose(ones[ones["n"] == 1]["srank_ratio"], 1.0)
    # the explicit curve of base-1e4 RoPE at n = 4096 against the closed form, computed here independently
    r = ones[(ones["label"] == "rope (base 1e4)") & (ones["n"] == 4096)]["fsv_ratio"].iloc[0]
    lam = float(torch.linalg.eigvalsh(rank1_rotated_gram(torch.ones(D), SPEC.inv_freq, 4096))[-1])
    assert r == pytest.approx(math.sqrt(lam / (4096 * D)), rel=1e-9)
    lim = out["limits"].set_index("variant")
    assert lim.loc["rope_id", "fsv_ratio_n2^30"] == pytest.approx(1 / math.sqrt(2), abs=1e-4)
    models = out["models"]
    assert np.allclose(models[models["n"] == 1]["fsv_ratio"], 1.0)  # position 0 is never rotated
    info = out["info"].iloc[0]
    assert info["capture_max_abs_diff"] <= 1e-5 * info["capture_scale"]  # hooks == interp.capture up to float32 noise
    # the model's own RoPE in the script = the SVD of the keys it rotates (independent recomputation for one layer)
    import interp

    model = interp.load_model("smollm2-135m")
    toks = interp.corpus.prompts(model, "pydoc", 1, 256)[0]
    k = interp.capture(model, toks).k_pre[3]
    spec3 = rope_specs(model.hf)[3]
    xr = rotate(k, torch.arange(256), spec3)
    row = models[(models["variant"] == "rope") & (models["layer"] == 3) & (models["head"] == 1) & (models["n"] == 256)].iloc[0]
    s_pre = np.linalg.svd(k[:, 1].double().numpy(), compute_uv=False)
    s_rot = np.linalg.svd(xr[:, 1].double().numpy(), compute_uv=False)
    assert row["fsv_ratio"] == pytest.approx(s_rot[0] / s_pre[0], rel=1e-4)
    for stem in ("rope_variants_fig7_ones", "rope_variants_fig7_models"):
        assert (tmp_path / f"{stem}.html").exists()


def test_parse_variant_reads_the_command_line_forms():
    from interp.rope.variants import parse_variant

    assert parse_variant("partial:0.25") == PartialRope(0.25)
    assert parse_variant("rope-id") == RopeID()
    assert parse_variant("shuffled:3") == ShuffledRope(3)
    assert parse_variant("yarn:8") == Yarn(8.0)
    with pytest.raises(ValueError, match="unknown RoPE variant 'warp'"):
        parse_variant("warp")
    with pytest.raises(ValueError, match="bad value"):
        parse_variant("scaled:fast")


def test_one_variant_registry_serves_loading_and_the_command_line():
    from interp.rope import VARIANT_KEYWORDS, VARIANT_TYPES, register_variant, variant_from_dict, variant_to_dict
    from interp.rope.variants import PartialRope, parse_variant

    for keyword, (cls, _) in VARIANT_KEYWORDS.items():  # every command-line kind loads back from a saved scan
        v = parse_variant(keyword)
        assert VARIANT_TYPES[type(v).__name__] is cls and variant_from_dict(variant_to_dict(v)) == v
    with pytest.raises(ValueError, match="already registered"):
        register_variant(PartialRope, "partial2")
    with pytest.raises(ValueError, match="already registered"):
        register_variant(type("Other", (PartialRope,), {}), "partial")


def test_shuffled_positions_are_the_models_own_tables_at_permuted_positions():
    """``ShuffledPositions(seed)``: the cos/sin tables the causal intervention installs equal the model's own rotary
    embedding evaluated at ``randperm(n, seed)`` (so only the positions RoPE encodes change), and it parses by name."""
    import interp
    from interp.hooks.intervene import variant_tables
    from interp.models.arch import rope_specs
    from interp.rope.variants import ShuffledPositions, parse_variant

    m = interp.load_model("tiny-llama", device="cpu")
    perm = torch.randperm(12, generator=torch.Generator().manual_seed(4))
    c, s = variant_tables(rope_specs(m.hf)[0], ShuffledPositions(4), torch.arange(12), None)
    rc, rs = m.hf.model.rotary_emb(torch.zeros(1, 12, 4), perm[None])
    torch.testing.assert_close(c, rc[0], rtol=0, atol=1e-6)
    torch.testing.assert_close(s, rs[0], rtol=0, atol=1e-6)
    assert parse_variant("shuffled-positions:4") == ShuffledPositions(4)
    with pytest.raises(ValueError, match="seed"):
        ShuffledPositions(-1)
