"""Geometry of paper 001 (interp.measures.geometry) against independent computations on small cases."""

import numpy as np
import pytest
import torch
from sklearn.metrics import davies_bouldin_score, silhouette_score

from interp.attention import expand_kv
from interp.hooks.capture import capture
from interp.engine import ScanConfig, merge_results, scan
from interp.measures import Dims, geometry
from tests.conftest import random_tokens


def _qk(n=40, h=4, kv=2, d=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, h, d, generator=g), torch.randn(n, kv, d, generator=g) + 1.0


def _silhouette_numpy(x: np.ndarray, labels: np.ndarray) -> float:
    """Rousseeuw's silhouette for two clusters, written out: s_i = (b_i - a_i) / max(a_i, b_i)."""
    dist = np.sqrt(((x[:, None] - x[None]) ** 2).sum(-1))
    s = []
    for i in range(len(x)):
        same, other = labels == labels[i], labels != labels[i]
        a = dist[i, same].sum() / (same.sum() - 1)
        b = dist[i, other].mean()
        s.append((b - a) / max(a, b))
    return float(np.mean(s))


def test_cluster_scores_equal_written_out_formulas_and_scikit_learn():
    q, k = _qk()
    pos = geometry.sample_positions(40, 30, seed=3)
    assert len(pos) == 15 and len(set(pos.tolist())) == 15
    got = geometry.cluster_scores(q, k, pos)
    for h in range(4):
        x = np.concatenate([q[pos, h].double().numpy(), k[pos, h // 2].double().numpy()])
        lab = np.r_[np.zeros(15), np.ones(15)]
        assert got[0, h] == pytest.approx(_silhouette_numpy(x, lab), abs=1e-6)  # float32 distances (docstring)
        assert got[0, h] == pytest.approx(silhouette_score(x, lab), abs=1e-6)
        c0, c1 = x[:15].mean(0), x[15:].mean(0)  # Davies-Bouldin of two clusters: (S_0 + S_1) / ||c_0 - c_1||
        s0, s1 = np.linalg.norm(x[:15] - c0, axis=1).mean(), np.linalg.norm(x[15:] - c1, axis=1).mean()
        assert got[1, h] == pytest.approx((s0 + s1) / np.linalg.norm(c0 - c1), rel=1e-10)
        assert got[1, h] == pytest.approx(davies_bouldin_score(x, lab), rel=1e-12)


def _sklearn_scores(q, k, pos):
    g = q.shape[1] // k.shape[1]
    lab = np.r_[np.zeros(len(pos)), np.ones(len(pos))]
    xs = [np.concatenate([q[pos, h].double().numpy(), k[pos, h // g].double().numpy()]) for h in range(q.shape[1])]
    return np.array([[silhouette_score(x, lab) for x in xs], [davies_bouldin_score(x, lab) for x in xs]])


def test_cluster_scores_stay_within_1e_6_of_scikit_learn_where_float32_cancels():
    """Far from the origin, with exact duplicates (layer-0 queries of a repeated token) and a far outlier (a sink key):
    the float32 expansion alone is off by ~1e-3 here; the float64 recomputation of near pairs keeps 1e-6."""
    g = torch.Generator().manual_seed(5)
    q = torch.randn(300, 6, 32, generator=g) * 0.5 + 40.0
    k = torch.randn(300, 2, 32, generator=g) * 0.5 + 41.0
    q[100:200] = q[100]  # one token repeated: 100 identical queries (and keys)
    k[100:200] = k[100]
    k[0] *= 30.0
    pos = geometry.sample_positions(300, 400, seed=2)
    got = geometry.cluster_scores(q, k, pos).numpy()
    ref = _sklearn_scores(q, k, pos)
    np.testing.assert_allclose(got[0], ref[0], atol=1e-6, rtol=0)
    np.testing.assert_allclose(got[1], ref[1], rtol=1e-10)


def test_cluster_scores_of_a_model_equal_scikit_learn(tiny_llama):
    """Every layer's captured pre- and post-RoPE q/k of a prompt with repeated tokens, against scikit-learn."""
    tokens = torch.cat([random_tokens(60, seed=1), random_tokens(60, seed=1)[1:], random_tokens(40, seed=2)[1:]])
    cap = capture(tiny_llama, tokens)
    for layer in range(tiny_llama.card.n_layers):
        pos = geometry.sample_positions(len(tokens), 200, layer)
        for q, k in ((cap.q_pre[layer], cap.k_pre[layer]), (cap.q_rot[layer], cap.k_rot[layer])):
            got, ref = geometry.cluster_scores(q, k, pos).numpy(), _sklearn_scores(q, k, pos)
            np.testing.assert_allclose(got[0], ref[0], atol=1e-6, rtol=0)
            np.testing.assert_allclose(got[1], ref[1], rtol=1e-9)


def test_default_subsample_stays_near_the_full_computation(smollm2):
    """The default 200 + 200 points (``CLUSTER_POINTS``) against every position of a 1024-token pydoc prompt, every
    layer and head of SmolLM2, pre and post RoPE: silhouette within 0.015 (measured 0.0149 at most; 0.009 for the
    500 + 500 points used before), Davies-Bouldin within 5 %; max q.k keeps its 500 queries (within 3 % of the mean
    over all queries), and the cluster positions are among them."""
    import interp

    tokens = interp.corpus.prompts(smollm2, "pydoc", 1, 1024)[0]
    cap = capture(smollm2, tokens)
    assert geometry.CLUSTER_POINTS == ScanConfig().cluster_points == 400
    every = torch.arange(len(tokens))
    for layer in range(smollm2.card.n_layers):
        pos = geometry.sample_positions(len(tokens), geometry.CLUSTER_POINTS, layer)
        assert len(pos) == 200
        for q, k in ((cap.q_pre[layer], cap.k_pre[layer]), (cap.q_rot[layer], cap.k_rot[layer])):
            sub, full = geometry.cluster_scores(q, k, pos), geometry.cluster_scores(q, k, every)
            assert (sub[0] - full[0]).abs().max() <= 0.015
            assert ((sub[1] - full[1]).abs() / full[1]).max() <= 0.05
            qpos = geometry.sample_positions(len(tokens), 2 * ScanConfig().max_qk_queries, layer)
            assert len(qpos) == 500 and set(pos.tolist()) <= set(qpos.tolist())
            mq = geometry.max_qk(q, k).double()
            torch.testing.assert_close(mq[:, qpos].mean(-1), mq.mean(-1), rtol=0.03, atol=0)


def test_well_separated_clouds_score_near_the_limits():
    g = torch.Generator().manual_seed(1)
    q = torch.randn(200, 1, 4, generator=g) * 0.01 + 10.0
    k = torch.randn(200, 1, 4, generator=g) * 0.01 - 10.0
    s = geometry.cluster_scores(q, k, torch.arange(200))
    assert s[0, 0] > 0.99 and s[1, 0] < 0.01


def test_received_and_max_qk_equal_the_materialised_dot_products():
    q, k = _qk(n=33)
    dots = torch.einsum("ihd,jhd->hij", q.double(), expand_kv(k, 4).double())  # [head, i, j]
    causal = torch.ones(33, 33, dtype=torch.bool).tril()
    rec = geometry.received(q, k)
    for j in (0, 5, 32):
        torch.testing.assert_close(rec[:, j], dots[:, j:, j].mean(-1))
    for window in (None, 5):
        vis = causal & (torch.arange(33)[:, None] - torch.arange(33)[None, :] < (window or 10**9))
        ref = dots.masked_fill(~vis, float("-inf")).amax(-1)
        torch.testing.assert_close(geometry.max_qk(q, k, window, block_size=7).double(), ref, atol=1e-5, rtol=1e-5)
        for some in (torch.tensor([0, 3, 17, 32]), torch.tensor([32, 4, 17, 0, 4, 9, 30, 31])):  # any order, repeats
            for bs in (1, 3, 64):
                torch.testing.assert_close(geometry.max_qk(q, k, window, some, block_size=bs).double(), ref[:, some], atol=1e-5, rtol=1e-5)


def test_scan_geometry_columns_equal_the_capture(tiny_gemma):
    """Sliding windows and MQA: the scan's geometry equals per-prompt values from the captured q/k, averaged."""
    prompts = [random_tokens(n, seed=n) for n in (30, 41)]  # different lengths: per-position means use the prompts that reach
    cfg = ScanConfig(geometry=True, cluster_points=20, max_qk_queries=10)
    h = scan(tiny_gemma, prompts, cfg, prompt_ids=[4, 9]).heads
    c = tiny_gemma.card
    caps = [capture(tiny_gemma, p) for p in prompts]
    L, H = c.n_layers, c.n_heads
    col = lambda name: torch.tensor(h[name].to_numpy()).view(L, H)  # noqa: E731
    for layer in range(L):
        w = c.sliding_window[layer]
        mq = torch.stack([geometry.max_qk(cp.q_rot[layer], cp.k_rot[layer], w).double()[:, geometry.sample_positions(len(cp.tokens), 20, pid * 1009 + layer)]
                          .mean(-1) for pid, cp in zip([4, 9], caps)]).mean(0)
        torch.testing.assert_close(col("max_qk_rot")[layer], mq, atol=1e-4, rtol=1e-5)
        sil = torch.stack([geometry.cluster_scores(cp.q_pre[layer], cp.k_pre[layer], geometry.sample_positions(len(cp.tokens), 20, pid * 1009 + layer))[0]
                           for pid, cp in zip([4, 9], caps)]).mean(0)
        torch.testing.assert_close(col("silhouette_pre")[layer], sil, atol=1e-5, rtol=1e-5)
        r0 = torch.stack([geometry.received(cp.q_rot[layer], cp.k_rot[layer])[:, 0] for cp in caps]).mean(0)
        torch.testing.assert_close(col("received_first_rot")[layer], r0, atol=1e-4, rtol=1e-5)
        k0 = torch.stack([cp.k_pre[layer][0].double().norm(dim=-1) for cp in caps]).mean(0)  # [kv_head]
        torch.testing.assert_close(col("key_norm_first")[layer], k0[torch.arange(H) // c.group_size], atol=1e-5, rtol=1e-5)
        # per position: the mean over the prompts that reach it (30 and 41 tokens), then the mean over positions 1..40
        norms = torch.full((2, 41, c.n_kv_heads), torch.nan, dtype=torch.float64)
        for i, cp in enumerate(caps):
            norms[i, : len(cp.tokens)] = cp.k_pre[layer].double().norm(dim=-1)
        rest = norms[:, 1:].nanmean(0).mean(0)
        torch.testing.assert_close(col("key_norm_rest")[layer], rest[torch.arange(H) // c.group_size], atol=1e-5, rtol=1e-5)


def test_geometry_sums_merge_exactly(tiny_llama):
    prompts = [random_tokens(n, seed=n) for n in (30, 45, 38)]
    cfg = ScanConfig(geometry=True, cluster_points=16)
    whole = scan(tiny_llama, prompts, cfg)
    merged = merge_results([scan(tiny_llama, prompts[:1], cfg, prompt_ids=[0]), scan(tiny_llama, prompts[1:], cfg, prompt_ids=[1, 2])])
    for name in (e.name for e in geometry.Geometry().entries(Dims(1, 1, 1, 2, 1), None)):
        torch.testing.assert_close(merged.state[name], whole.state[name], atol=1e-9, rtol=1e-9)
