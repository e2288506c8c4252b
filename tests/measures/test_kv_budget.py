"""The KV-budget predictor (``interp.measures.kv_budget``) against independent computations: with no spread and sink keys
equal to the bulk mean it is the softmax of the RoPE-rotated mean query against the rotated mean keys (kvpress's
zeroth-order case, rotated here with ``interp.rope.rotate``); its distant mass and slash profile equal the same
definitions applied to its materialised matrix; its spread term matches a Monte-Carlo of Gaussian queries and keys;
kvpress's score equals a direct re-computation from captured pre-RoPE vectors."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from interp.engine import ScanConfig, scan
from interp.hooks.capture import capture
from interp.measures import kv_budget as kvb
from interp.models.arch import rope_specs
from interp.rope import RopeSpec, default_inv_freq, rotate
from tests.conftest import random_tokens

D, H, K, S = 16, 4, 2, 4  # d_head, query heads, kv heads, sink keys


def _stats_from_vectors(q: torch.Tensor, k: torch.Tensor, sink: torch.Tensor | None = None) -> kvb.Stats:
    """Zero-spread statistics of fixed real vectors q [head, d], k [kv_head, d] (sink [kv_head, S, d]: default k)."""
    zq, zk = kvb.planes(q, "rotate_half"), kvb.planes(k, "rotate_half")
    zs = zk[:, None].expand(K, S, -1) if sink is None else kvb.planes(sink, "rotate_half")
    return kvb.Stats(zq, zq.abs() ** 2, zk, zk.abs() ** 2, zs, zs.abs() ** 2)


@pytest.mark.parametrize("window", [None, 7])
def test_zero_spread_is_the_softmax_of_rotated_means(window):
    """No spread, sinks = bulk mean: A(i, j) = softmax_j(scale * R(i) q . R(j) k) over the visible keys, with the
    rotation done by interp.rope.rotate (float64), the model's scale and a sliding window."""
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(H, D, generator=g, dtype=torch.float64), torch.randn(K, D, generator=g, dtype=torch.float64)
    spec = RopeSpec(default_inv_freq(100.0, D).double())
    N, scale = 20, 0.4
    pred = kvb.predict(_stats_from_vectors(q, k), spec.inv_freq, torch.ones(D // 2), scale, N, window=window)
    pos = torch.arange(N)
    q_rot = rotate(q[None].expand(N, H, D).clone(), pos, spec)  # [pos, head, d]
    k_rot = rotate(k[None].expand(N, K, D).clone(), pos, spec).repeat_interleave(H // K, dim=1)
    logits = scale * torch.einsum("ihd,jhd->hij", q_rot, k_rot)
    i, j = pos[:, None], pos[None, :]
    vis = (j <= i) & ((i - j) < (window or N + 1))
    ref = torch.softmax(logits.masked_fill(~vis, -math.inf), -1)
    torch.testing.assert_close(pred.matrix(), ref, rtol=1e-6, atol=1e-9)


def test_read_outs_equal_their_definitions_on_the_matrix():
    """distant_mass and slash_profile (cumulative sums) equal the definitions applied to the materialised A: share
    outside {j < S'} | {i - j < W} summed over queries over N; mean of A[i, i - delta] over i >= skip + delta."""
    g = torch.Generator().manual_seed(1)
    q, k, sink = (torch.randn(*s, generator=g, dtype=torch.float64) for s in ((H, D), (K, D), (K, S, D)))
    st = _stats_from_vectors(q, k, sink)
    st.q_sq, st.k_sq = st.q_sq * 1.5, st.k_sq * 1.2  # some spread, so the gain is not 1
    spec = RopeSpec(default_inv_freq(50.0, D).double())
    N = 40
    for window in (None, 13):
        p = kvb.predict(st, spec.inv_freq, torch.ones(D // 2), 0.3, N, window=window)
        A = p.matrix()
        torch.testing.assert_close(A.sum(-1), torch.ones(H, N, dtype=torch.float64))
        i, j = torch.arange(N)[:, None], torch.arange(N)[None, :]
        for sink_keys, win in ((S, 6), (2, 9), (6, 3)):
            far = (j >= sink_keys) & ((i - j) >= win)
            torch.testing.assert_close(kvb.distant_mass(p, sink_keys, win), (A * far).sum((1, 2)) / N)
        prof = kvb.slash_profile(p)
        for d in (0, 1, 5, 12):
            rows = torch.arange(S + d, N)
            ref = A[:, rows, rows - d].mean(-1)
            if window is not None and d >= window:
                assert torch.isnan(prof[:, d]).all()
            else:
                torch.testing.assert_close(prof[:, d], ref)


def test_rem_gain_closed_form():
    """phi = v/2 up to v = 2 ln n, sqrt(2 v ln n) - ln n beyond (continuous at the boundary), 0 for one key."""
    n = torch.tensor([1.0, 10.0, 1000.0])
    v = torch.tensor([0.5, 2 * math.log(10.0), 30.0])
    phi = kvb.rem_gain(v, n)
    assert torch.all(phi[:, 0] == 0)
    assert phi[0, 1] == pytest.approx(0.25) and phi[1, 1] == pytest.approx(math.log(10.0))
    assert phi[2, 2] == pytest.approx(math.sqrt(2 * 30 * math.log(1000)) - math.log(1000))


def test_spread_term_matches_monte_carlo():
    """Gaussian keys around the cone (per-plane isotropic spread, v <= 2 ln n) against one fixed sink key: the predicted
    sink mass equals the Monte-Carlo mean of the exact softmax over many draws. The predictor replaces the mean ratio
    by a ratio of means; with n = 300 keys of log-normal weight (v = 1) the relative spread of the denominator is
    sqrt((e^v - 1) / n) = 7.6%, so the second-order gap is below 1% of the sink mass: the tolerance."""
    g = torch.Generator().manual_seed(2)
    d, n, scale = 8, 300, 1.0
    spec = RopeSpec(default_inv_freq(1e4, d).double())
    mu_q, mu_k = torch.randn(d, generator=g, dtype=torch.float64), torch.randn(d, generator=g, dtype=torch.float64) * 0.2
    sink = mu_k * 0 + torch.randn(d, generator=g, dtype=torch.float64) * 0.3
    sigma = 1.0 / (scale * mu_q.norm())  # key noise std per channel: logit variance = scale^2 sigma^2 |q|^2 = 1
    zq, zk = kvb.planes(mu_q[None], "rotate_half"), kvb.planes(mu_k[None], "rotate_half")
    zs = kvb.planes(sink[None, None], "rotate_half")
    st = kvb.Stats(zq, zq.abs() ** 2, zk, zk.abs() ** 2 + 2 * sigma**2, zs, zs.abs() ** 2)
    N = n + 1  # one sink key (skip = 1), then n bulk keys; the last query sees all
    pred = kvb.predict(st, spec.inv_freq, torch.ones(d // 2), scale, N)
    predicted_sink = float(pred.matrix()[0, -1, 0])
    pos = torch.arange(N)
    q_rot = rotate(mu_q[None, None].expand(1, 1, d).clone(), pos[-1:], spec)[0, 0]
    draws = []
    for _ in range(400):
        keys = mu_k + sigma * torch.randn(N, d, generator=g, dtype=torch.float64)
        keys[0] = sink
        logit = scale * rotate(keys[:, None], pos, spec)[:, 0] @ q_rot
        draws.append(float(torch.softmax(logit, 0)[0]))
    assert predicted_sink == pytest.approx(float(np.mean(draws)), rel=0.01)


def test_kvpress_score_equals_a_direct_computation(tiny):
    """The measure's kvpress_score equals kvpress's recipe done by hand on captured pre-RoPE vectors: mean q and k over
    all positions, placed at positions 0..q_len-1 and rotated with the layer's RoPE (interp.rope.rotate), the last
    query's softmax, mean of the cumulative sum, mean over the kv head's query heads."""
    c = tiny.card
    toks = random_tokens(40, seed=3)
    q_len = 30
    res = scan(tiny, toks[None], ScanConfig(kv_budget=True, kvpress_q_len=q_len))
    cap = capture(tiny, toks)
    specs = rope_specs(tiny.hf)
    pos = torch.arange(q_len)
    for l in range(c.n_layers):
        mq = cap.q_pre[l].double().mean(0)  # [head, d]
        mk = cap.k_pre[l].double().mean(0)
        spec = RopeSpec(specs[l].inv_freq.double(), specs[l].scaling, specs[l].pairing)
        qr = rotate(mq[None].expand(q_len, -1, -1).clone(), pos, spec)[-1]  # [head, d]
        kr = rotate(mk[None].expand(q_len, -1, -1).clone(), pos, spec).repeat_interleave(c.group_size, dim=1)
        a = torch.softmax(c.attn_scale[l] * torch.einsum("hd,jhd->hj", qr, kr), -1)
        ref = a.cumsum(-1).mean(-1).view(c.n_kv_heads, -1).mean(-1)[torch.arange(c.n_heads) // c.group_size]
        got = torch.as_tensor(res.heads.query("layer == @l").sort_values("head")["kvpress_score"].to_numpy())
        torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-6)


def test_rotation_table_reads_the_models_rope(tiny):
    """rotation_table(q_pre, q_rot) recovers exp(i theta_l p) of the layer's RoPE spec at every position."""
    cap = capture(tiny, random_tokens(16, seed=4))
    spec = rope_specs(tiny.hf)[0]
    r = kvb.rotation_table(cap.q_pre[0], cap.q_rot[0], tiny.card.pairing)
    ang = torch.arange(16, dtype=torch.float64)[:, None] * spec.inv_freq.double()[None]
    torch.testing.assert_close(r, torch.polar(torch.full_like(ang, spec.scaling), ang), rtol=0, atol=2e-6)


def test_predicted_needs_the_measure(tiny):
    """Asking a scan without kv_budget for predictions: one KeyError naming the fix."""
    res = scan(tiny, random_tokens(24, seed=5)[None], ScanConfig())
    with pytest.raises(KeyError, match="kv_budget=True"):
        kvb.predicted(res, 24, 4, 8)
