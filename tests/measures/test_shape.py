"""Shape-of-attention scores (``interp.measures.shape``) equal the same definitions applied to materialised patterns
(``interp.hooks.capture(..., patterns=True)``, ``interp.attention.attention_pattern``), on both engines, on the tiny
models (Llama: GQA; Gemma-3: sliding window, MQA; Qwen2: biases), prompt lengths not multiples of the block size."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from interp.engine import ScanConfig, scan
from interp.hooks.capture import capture
from interp.measures import shape
from tests.conftest import random_tokens

SMALL = {"vs": (3, 5), "ashape": (2, 6), "distant": (1, 4)}  # budgets small enough that nothing covers everything
SKIP = 4


def _reference(A: torch.Tensor, window: int | None, b=SMALL, forced=2, last_q=16) -> dict[str, np.ndarray]:
    """Every column's per-prompt value from one layer's full pattern ``A [head, N, N]`` (float64, brute force)."""
    A = A.double()
    H, N, _ = A.shape
    i, j = torch.arange(N)[:, None], torch.arange(N)[None, :]
    lag = (i - j).clamp(min=0)
    ent = torch.special.entr(A).sum(-1)  # [head, N]
    n_vis = (i - j >= 0) & ((i - j < window) if window else True)
    n_vis = n_vis.sum(-1).double()
    out = {"entropy": ent.mean(-1),
           "entropy_norm": (ent[:, n_vis > 1] / n_vis[n_vis > 1].log()).sum(-1) / max(int((n_vis > 1).sum()), 1)}
    km = A.sum(1)
    n_top = math.ceil(0.01 * (N - SKIP))
    out["vertical_top1pct"] = km[:, SKIP:].topk(n_top, -1).values.sum(-1) / N
    lag_all = torch.stack([torch.stack([torch.diagonal(A[h], -d).sum() for d in range(N)]) for h in range(H)])

    def ashape(S, W):
        return (A * ((j < S) | (i - j < W))).sum((1, 2)) / N

    def vs(keys, lags, rows=None):
        on_key = torch.zeros(H, N, dtype=torch.bool).scatter_(1, keys, True)
        on_lag = torch.zeros(H, N, dtype=torch.bool).scatter_(1, lags, True)
        mask = on_key[:, None, :] | on_lag[:, lag]
        if rows is None:
            return (A * mask).sum((1, 2)) / N
        return (A[:, rows] * mask[:, rows]).sum((1, 2)) / len(rows)

    v, s = b["vs"]
    out["ashape_coverage"] = ashape(*b["ashape"])
    out["distant_mass"] = 1 - ashape(*b["distant"])
    out["vs_coverage"] = vs(km.topk(v, -1).indices, lag_all.topk(s, -1).indices)
    rows = torch.arange(N - min(last_q, N), N)
    A_last = A[:, rows]
    vert = A_last.sum(1)
    vert[:, :forced] = math.inf
    sl = torch.stack([torch.stack([torch.diagonal(A_last[h], rows[0] - d).sum() for d in range(N)]) for h in range(H)])
    sl[:, :forced] = math.inf
    keys, lags = vert.topk(v, -1).indices, sl.topk(s, -1).indices
    out["vs_est_coverage"] = vs(keys, lags, rows)
    out["vs_picked_coverage"] = vs(keys, lags)
    return {k: v.numpy() for k, v in out.items()}


@pytest.fixture
def small_budgets(monkeypatch):
    monkeypatch.setattr(shape, "budgets", lambda n: SMALL)
    monkeypatch.setattr(shape, "MINF_FORCED", 2)
    monkeypatch.setattr(shape, "MINF_LAST_Q", 16)


def _prompts():
    return [random_tokens(45, seed=1), random_tokens(29, seed=2, vocab=30)]


@pytest.mark.parametrize("engine", ["fused-cpu", "python"])
def test_shape_scores_equal_materialised_patterns(tiny, small_budgets, monkeypatch, engine):
    monkeypatch.setenv("INTERP_KERNEL", "0" if engine == "python" else "auto")
    from interp.engine import kernels

    if engine == "fused-cpu" and not kernels.available():
        pytest.skip("the fused kernel did not build here")
    prompts = _prompts()
    res = scan(tiny, prompts, ScanConfig(shape=True, block_size=8))
    assert res.meta["engine"] == engine
    h = res.heads
    card = tiny.card
    want = {}
    for p in prompts:
        pats = capture(tiny, p, patterns=True).patterns
        for layer, A in enumerate(pats):
            ref = _reference(A, card.sliding_window[layer])
            for k, val in ref.items():
                want.setdefault(k, np.zeros((card.n_layers, card.n_heads)))[layer] += val / len(prompts)
    for col, val in want.items():
        np.testing.assert_allclose(h[col].to_numpy(), val.reshape(-1), atol=2e-5, err_msg=f"{engine} {col}")
    np.testing.assert_allclose(h["vs_est_error"], h["vs_est_coverage"] - h["vs_picked_coverage"], atol=1e-12)
    assert (h["is_streaming"] == (h["distant_mass"] < shape.STREAMING_THRESHOLD)).all()
    assert 0.05 < h["distant_mass"].mean() < 0.95  # the budgets leave real mass on both sides


def test_distant_mass_leaves_out_prompts_without_a_distant_key(tiny, small_budgets):
    """A prompt of N <= S + W tokens has no key outside the sinks and the window: it is not averaged in as 0 (which
    would make every head look streaming); with no prompt long enough, distant_mass is NaN and no head is streaming."""
    S, W = SMALL["distant"]
    short, long = random_tokens(S + W, seed=3), random_tokens(40, seed=4)
    cfg = ScanConfig(shape=True, block_size=8)
    only_short = scan(tiny, [short], cfg).heads
    assert only_short["distant_mass"].isna().all() and not only_short["is_streaming"].any()
    mixed, alone = scan(tiny, [short, long], cfg).heads, scan(tiny, [long], cfg).heads
    np.testing.assert_allclose(mixed["distant_mass"], alone["distant_mass"], atol=1e-12)
    assert alone["distant_mass"].between(0, 1).all()


def test_vertical_mass_and_top_keys_equal_materialised_patterns(tiny):
    prompts = _prompts()
    res = scan(tiny, prompts, ScanConfig(shape=True, block_size=8))
    card = tiny.card
    L, H = card.n_layers, card.n_heads
    N = max(p.numel() for p in prompts)
    mass, seen = torch.zeros(L, H, N, dtype=torch.float64), torch.zeros(L, N, dtype=torch.float64)
    for p in prompts:
        n = p.numel()
        for layer, A in enumerate(capture(tiny, p, patterns=True).patterns):
            mass[layer, :, :n] += A.double().sum(1)
            w = card.sliding_window[layer]
            seen[layer, :n] += (A.new_ones(n, n).double().tril().triu(-(w - 1) if w else -n)).sum(0)
    torch.testing.assert_close(res.state["vertical_mass"], mass, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(res.state["vertical_seen"], seen)
    pos, weight = shape.top_keys(res, k=3, min_queries=10)
    mean = mass / seen[:, None].clamp(min=1)
    mean[..., :SKIP] = -1
    low = seen < torch.minimum(torch.full((L, 1), 10.0, dtype=torch.float64), seen.max(-1, keepdim=True).values / 2)
    mean[low[:, None].expand_as(mean)] = -1
    want = mean.topk(3, -1)
    torch.testing.assert_close(weight, want.values, atol=1e-6, rtol=1e-6)
    h = res.heads
    assert ((pos >= SKIP) & ~low.gather(1, pos.reshape(L, -1)).reshape(L, H, 3)).all()
    pos1, w1 = shape.top_keys(res, k=1)  # the columns use VERTICAL_MIN_QUERIES
    np.testing.assert_array_equal(h["vertical_top_key"].to_numpy(), pos1[..., 0].reshape(-1).double().numpy())
    np.testing.assert_allclose(h["vertical_top_key_weight"].to_numpy(), w1[..., 0].reshape(-1).numpy())
    assert (pos1 >= SKIP).all()


def test_budgets_scale_for_short_prompts_and_apply_as_published_on_long_ones():
    assert shape.budgets(1024) == {"vs": (31, 190), "ashape": (30, 50), "distant": (4, 64)}
    assert shape.budgets(40000) == {"vs": (1000, 6096), "ashape": (100, 800), "distant": (128, 256)}
    assert shape.budgets(20) == {"vs": (20, 20), "ashape": (20, 20), "distant": (4, 20)}


def test_heavy_hitters_names_the_tokens(tiny_llama):
    toks = random_tokens(70, seed=3)
    res = scan(tiny_llama, [toks], ScanConfig(shape=True))
    df = shape.heavy_hitters(res, toks, tiny_llama.tokenizer, k=2)
    card = tiny_llama.card
    assert len(df) == card.n_layers * card.n_heads * 2
    ok = df[df.position >= 0]
    assert len(ok) and (ok.position >= SKIP).all()
    assert all(t == tiny_llama.tokenizer.decode([int(toks[p])]) for t, p in zip(ok.token, ok.position))
    with pytest.raises(ValueError, match="one prompt"):
        shape.heavy_hitters(scan(tiny_llama, [toks, toks], ScanConfig(shape=True)), toks, tiny_llama.tokenizer)


@pytest.mark.parametrize("engine", ["fused-cpu", "python"])
@pytest.mark.parametrize("window,softcap", [(None, 3.0), (7, 3.0), (None, None)])
def test_one_layer_with_soft_cap_and_window_equals_the_pattern(tiny_llama, small_budgets, monkeypatch, engine, window, softcap):
    """The collector on raw q/k (soft-capped logits, sliding window, GQA 4:2, 53 tokens = 6 blocks of 8 and 5): every
    per-prompt value equals the definitions on ``attention_pattern``."""
    from interp.attention import attention_pattern
    from interp.engine import kernels
    from interp.engine.collector import Collector, new_state

    monkeypatch.setenv("INTERP_KERNEL", "0" if engine == "python" else "auto")
    if engine == "fused-cpu" and not kernels.available():
        pytest.skip("the fused kernel did not build here")
    card, N, d = tiny_llama.card, 53, tiny_llama.card.d_head
    cfg = ScanConfig(shape=True, block_size=8)
    g = torch.Generator().manual_seed(5)
    q, k = torch.randn(N, card.n_heads, d, generator=g) * 2, torch.randn(N, card.n_kv_heads, d, generator=g) * 2
    col = Collector(card, cfg, new_state(card, N, cfg))
    col.begin_prompt(0, random_tokens(N))
    col.attend(0, q, k, k, d**-0.5, window, softcap, q, k)
    assert col.engine == engine
    st = col.state
    ref = _reference(attention_pattern(q, k, d**-0.5, window, softcap), window)
    got = {"entropy": st["shape_entropy"][0, :, 0], "entropy_norm": st["shape_entropy"][0, :, 1],
           "vertical_top1pct": st["vertical_top1pct_sum"][0],
           **{name: st["shape_coverage"][0, :, i] for i, name in enumerate(shape.COVERAGE)}}
    for name, val in got.items():
        np.testing.assert_allclose(val.numpy(), ref[name], atol=2e-5, err_msg=name)
