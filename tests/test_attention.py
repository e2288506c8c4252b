"""Exact block attention against the materialised pattern and torch's sdpa."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from interp.attention import attention_blocks, attention_pattern, expand_kv, key_weight, lag_sums
from interp.errors import ShapeError


def _qkv(n, h=4, kv=2, d=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(n, h, d, generator=g) * 2, torch.randn(n, kv, d, generator=g) * 2, torch.randn(n, kv, d, generator=g))


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 70), block=st.integers(1, 32), window=st.sampled_from([None, 1, 5, 16]),
       softcap=st.sampled_from([None, 3.0]), heads=st.sampled_from([(4, 2), (4, 1), (3, 3)]))
def test_blocks_equal_full_pattern(n, block, window, softcap, heads):
    q, k, v = _qkv(n, *heads)
    ref = attention_pattern(q, k, 0.3, window, softcap)
    out = torch.empty(n, heads[0], q.shape[2])
    for b in attention_blocks(q, k, 0.3, window, softcap, block, v=v, out=out):
        got = b.probs_rev.flip(-1)  # keys back in order 0..i1-1
        torch.testing.assert_close(got, ref[:, b.i0 : b.i1, : b.i1], atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(lag_sums(b.probs_rev), _diag_sums(ref[:, b.i0 : b.i1], b.i0, b.i1), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out, torch.einsum("hqk,khd->qhd", ref, expand_kv(v, heads[0])), atol=1e-5, rtol=1e-5)


def _diag_sums(rows, i0, i1):
    """Independent: loop over queries and lags."""
    H = rows.shape[0]
    out = torch.zeros(H, i1)
    for r in range(i1 - i0):
        i = i0 + r
        for d in range(i + 1):
            out[:, d] += rows[:, r, i - d]
    return out


def test_pattern_matches_torch_sdpa_output():
    q, k, v = _qkv(33)
    ref = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(0, 1)[None], expand_kv(k, 4).transpose(0, 1)[None], expand_kv(v, 4).transpose(0, 1)[None],
        is_causal=True, scale=0.3)[0].transpose(0, 1)
    out = torch.empty_like(q)
    for _ in attention_blocks(q, k, 0.3, block_size=7, v=v, out=out):
        pass
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)


def test_rows_sum_to_one_and_mask_is_exact():
    q, k, _ = _qkv(20)
    A = attention_pattern(q, k, 0.5, window=4)
    torch.testing.assert_close(A.sum(-1), torch.ones(4, 20))
    i, j = torch.meshgrid(torch.arange(20), torch.arange(20), indexing="ij")
    assert (A[:, (j > i) | (i - j >= 4)] == 0).all()


@pytest.mark.parametrize("key", [0, 3])
def test_key_weight_is_pattern_column(key):
    q, k, _ = _qkv(45)
    ref = attention_pattern(q, k, 0.4, None, None)[:, :, key]
    torch.testing.assert_close(key_weight(q, k, 0.4, block_size=8, key=key), ref, atol=1e-6, rtol=1e-5)


def test_expand_kv_maps_head_to_group():
    k = torch.arange(2).float().view(1, 2, 1).expand(3, 2, 4)
    e = expand_kv(k, 6)
    assert e[0, :, 0].tolist() == [0, 0, 0, 1, 1, 1]  # h -> h // (6 // 2)
    with pytest.raises(ShapeError):
        expand_kv(k, 5)


def test_shape_errors_name_the_layout():
    with pytest.raises(ShapeError, match=r"\[pos, head, d_head\]"):
        attention_pattern(torch.randn(4, 3, 8), torch.randn(4, 2, 8), 1.0)


def test_stratified_rows_draw_one_position_per_stratum_and_weigh_to_the_mean():
    from interp.attention import stratified_rows

    rows, w = stratified_rows(1000, 7, seed=3)
    edges = [(s * 1000) // 7 for s in range(8)]
    assert [edges[s] <= int(r) < edges[s + 1] for s, r in enumerate(rows)] == [True] * 7
    torch.testing.assert_close(w, torch.tensor([(edges[s + 1] - edges[s]) / 1000 for s in range(7)], dtype=torch.float64))
    assert torch.equal(stratified_rows(1000, 7, seed=3)[0], rows)  # seeded
    assert not torch.equal(stratified_rows(1000, 7, seed=4)[0], rows)
    x = torch.rand(1000, dtype=torch.float64)  # unbiased: the mean of the estimate over many seeds is the mean
    est = torch.stack([x[r] @ ww for r, ww in (stratified_rows(1000, 7, seed=s) for s in range(4000))])
    assert abs(float(est.mean() - x.mean())) < 4 * float(est.std()) / 4000**0.5
    rows, w = stratified_rows(5, 7, seed=0)  # short prompts: every position, exact
    assert rows.tolist() == [0, 1, 2, 3, 4] and torch.allclose(w, torch.full((5,), 0.2, dtype=torch.float64))
    with pytest.raises(ValueError, match="n_rows >= 1"):
        stratified_rows(10, 0, 0)


@pytest.mark.parametrize("window, softcap", [(None, None), (6, None), (None, 2.0), (9, 3.0)])
def test_key_weight_rows_equals_the_pattern_column(window, softcap):
    from interp.attention import key_weight_rows

    q, k, _ = _qkv(40, seed=5)
    rows = torch.tensor([0, 3, 4, 17, 30, 39])
    A = attention_pattern(q, k, 0.4, window, softcap)
    for key in (0, 3):
        got = key_weight_rows(q, k, rows, 0.4, window, softcap, key=key, max_elements=4 * 40 * 2)  # chunks of two rows
        torch.testing.assert_close(got, A[:, rows, key], rtol=1e-5, atol=1e-6)


def test_key_weight_rows_in_any_order():
    from interp.attention import key_weight_rows

    q, k, _ = _qkv(30, seed=6)
    rows = torch.tensor([17, 2, 29, 9])
    A = attention_pattern(q, k, 0.4, None, None)
    torch.testing.assert_close(key_weight_rows(q, k, rows, 0.4, chunk=2), A[:, rows, 0], rtol=1e-5, atol=1e-6)
