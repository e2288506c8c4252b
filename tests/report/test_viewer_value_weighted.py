"""Value-weighted attention in the viewer (issue 19 part 3; Kobayashi et al. 2020): the view's ``probs_v`` / ``before_v``
equal ``A[i, j] ||v_j|| / sum_k A[i, k] ||v_k||`` computed independently from ``interp.capture``'s q, k and v (GQA on
tiny-llama, MQA and sliding windows on tiny-gemma3), the page carries both maps (decoded from the format the module
docstring describes), and the toggle appears only when the weighted map is embedded."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from interp.attention import attention_pattern
from interp.errors import ConfigError, ShapeError
from interp.hooks.capture import capture
from interp.report.viewer import attention_view, decode_values, value_weighted_attention
from tests.conftest import random_tokens
from tests.report.test_viewer import decode, island


def _independent(model, cap, layer: int, head: int) -> np.ndarray:
    """``[N, N]`` float64 value-weighted attention of one head, written out from q, k, v (no viewer code)."""
    c = model.card
    q = cap.q_rot[layer][:, head].double()  # [N, d]
    kv = head // (c.n_heads // c.n_kv_heads)
    k, v = cap.k_rot[layer][:, kv].double(), cap.v[layer][:, kv].double()
    s = (q @ k.T) * c.attn_scale[layer]
    if c.softcap:
        s = c.softcap * torch.tanh(s / c.softcap)
    N = q.shape[0]
    i, j = torch.arange(N)[:, None], torch.arange(N)[None, :]
    vis = (j <= i) & ((i - j < c.sliding_window[layer]) if c.sliding_window[layer] else True)
    A = torch.softmax(s.masked_fill(~vis, float("-inf")), -1)
    w = A * v.norm(dim=-1)[None, :]
    return (w / w.sum(-1, keepdim=True)).numpy()


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-gemma3"])
def test_value_weighted_equals_an_independent_computation(name, tiny_llama, tiny_gemma):
    model = {"tiny-llama": tiny_llama, "tiny-gemma3": tiny_gemma}[name]
    toks = random_tokens(40, seed=8)
    layers, heads = [model.card.n_layers - 1, 0], [3, 0, 2]
    view = attention_view(model, toks, layers=layers, heads=heads, start=9, window=22)
    cap = capture(model, toks[:31])
    moved = 0.0
    for li, layer in enumerate(layers):
        for hi, h in enumerate(heads):
            ref = _independent(model, cap, layer, h)
            np.testing.assert_allclose(view.probs_v[li, hi], ref[9:31, 9:31], atol=1e-6)
            np.testing.assert_allclose(view.before_v[li, hi], ref[9:31, :9].sum(-1), atol=1e-6)
            np.testing.assert_allclose(view.pattern(layer, h, value_weighted=True), ref[9:31, 9:31], atol=1e-6)
            moved = max(moved, float(np.abs(view.probs_v[li, hi] - view.probs[li, hi]).max()))
    assert moved > 0.01  # the weighting changes the map: the test is not comparing attention with itself
    np.testing.assert_allclose(view.probs_v.sum(-1) + view.before_v, 1.0, atol=1e-5)
    # the page carries both maps, quantised (independent decoder on the renamed arrays)
    data = island(view.html())
    assert data["value_weighted"] is True
    probs, before = decode(data)
    probs_v, before_v = decode({**data, "values": data["values_v"], "before": data["before_v"]})
    tol = 0.5 / 255 + 1e-7
    np.testing.assert_allclose(probs, view.probs, atol=tol)
    np.testing.assert_allclose(probs_v, view.probs_v, atol=tol)
    np.testing.assert_allclose(before_v, view.before_v, atol=tol)
    ref_p, ref_b = decode_values(data, value_weighted=True)
    np.testing.assert_array_equal(ref_p, probs_v)
    np.testing.assert_array_equal(ref_b, before_v)


def test_value_weighted_attention_function():
    torch.manual_seed(0)
    q, k, v = torch.randn(6, 4, 8), torch.randn(6, 2, 8), torch.randn(6, 2, 8)
    A = attention_pattern(q, k, 8 ** -0.5, None, None)  # [head, N, N]
    got = value_weighted_attention(A, v)
    for h in range(4):
        w = A[h].double() * v[:, h // 2].double().norm(dim=-1)
        torch.testing.assert_close(got[h].double(), w / w.sum(-1, keepdim=True), atol=1e-6, rtol=0)
    v0 = v.clone()
    v0[:, 1] = 0  # kv head 1 has zero values everywhere: its query heads' rows are all 0, not NaN
    z = value_weighted_attention(A, v0)
    assert torch.isfinite(z).all() and (z[2:] == 0).all()
    with pytest.raises(ShapeError, match="do not match"):
        value_weighted_attention(A, v[:5])


def test_off_switch_and_size_limit(tiny_llama):
    toks = random_tokens(12, seed=1)
    off = attention_view(tiny_llama, toks, layers=0, value_weighted=False)
    page = off.html()
    assert off.probs_v is None and 'class="vw"' not in page and island(page)["value_weighted"] is False
    assert "values_v" not in island(page)
    with pytest.raises(ConfigError, match="no value-weighted attention"):
        off.pattern(0, 0, value_weighted=True)
    on = attention_view(tiny_llama, toks, layers=0)
    assert 'class="vw"' in on.html() and "Kobayashi et al. 2020" in on.html()
    n = 4 * 12 * 13 // 2  # one layer, 4 heads
    attention_view(tiny_llama, toks, layers=0, max_values=2 * n)
    with pytest.raises(ConfigError, match="twice for value weighting.*or value_weighted=False"):
        attention_view(tiny_llama, toks, layers=0, max_values=2 * n - 1)
    attention_view(tiny_llama, toks, layers=0, max_values=n, value_weighted=False)
