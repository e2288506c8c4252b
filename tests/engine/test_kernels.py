"""The fused kernel equals the materialised pattern on every output, and its build fails loudly when asked to."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from interp.engine import kernels
from interp.attention import attention_pattern, expand_kv
from interp.errors import ShapeError

needs_kernel = pytest.mark.skipif(not kernels.available(), reason="the fused kernel did not build on this machine")


def _reference(q, k, v, qp, kp, scale, window, softcap, skip, M):
    """Every output of ``stream_layer`` from full patterns (independent of the tiling)."""
    N, H, _ = q.shape
    A = attention_pattern(q, k, scale, window, softcap)
    out = torch.einsum("hij,jhd->ihd", A, expand_kv(v, H))
    Ad = A.double().clone()
    Ad[:, :, :skip] = 0
    lag = torch.stack([torch.stack([torch.diagonal(Ad[h], -d).sum() for d in range(N)]) for h in range(H)])
    amap = torch.zeros(H, M, M, dtype=torch.float64)
    m = min(M, N)
    amap[:, :m, :m] = A[:, :m, :m].double()
    sink_pre = attention_pattern(qp, kp, scale, window, softcap)[:, :, 0]
    return out, lag, A[:, :, 0], amap, sink_pre



# random layers for the kernel-against-pattern tests: length, kv heads, group size, d_head, tile, window, soft-cap
SHAPES = dict(n=st.integers(1, 90), kv=st.sampled_from([1, 2, 3]), group=st.sampled_from([1, 2, 3]),
              d=st.sampled_from([4, 16, 24]), block=st.integers(1, 40), window=st.sampled_from([None, 1, 5, 17]),
              softcap=st.sampled_from([None, 3.0]), seed=st.integers(0, 2**16))


@needs_kernel
@settings(max_examples=25, deadline=None)
@given(**SHAPES)
def test_stream_layer_equals_full_patterns(n, kv, group, d, block, window, softcap, seed):
    g = torch.Generator().manual_seed(seed)
    H = kv * group
    q, qp = torch.randn(n, H, d, generator=g) * 3, torch.randn(n, H, d, generator=g) * 3
    k, kp, v = (torch.randn(n, kv, d, generator=g) * 3 for _ in range(3))
    scale, skip, M = d**-0.5, 4, 12
    got = kernels.stream_layer(q, k, v, scale, window, softcap, block, skip, M, qp, kp)
    ref = _reference(q, k, v, qp, kp, scale, window, softcap, skip, M)
    for name, a, b in zip(("out", "lag", "sink", "map", "sink_pre"), got, ref):
        # probabilities to 1e-5; the output sums p * v, so its float32 error (exp_u20: ~1e-6 relative) scales with |v|
        atol = 4e-6 * float(v.abs().max()) if name == "out" else 1e-5
        torch.testing.assert_close(a.double(), b.double(), atol=max(atol, 1e-5), rtol=0, msg=lambda m, name=name: f"{name}: {m}")


@needs_kernel
@settings(max_examples=10, deadline=None)
@given(n=st.integers(1, 70), block=st.integers(1, 40), window=st.sampled_from([None, 6]), seed=st.integers(0, 2**16))
def test_stream_layer_without_v_gives_the_same_reductions(n, block, window, seed):
    """Statistics-only passes (the scan's counterfactual RoPE variants) skip P @ V and nothing else."""
    g = torch.Generator().manual_seed(seed)
    q, k, v = torch.randn(n, 4, 8, generator=g) * 3, torch.randn(n, 2, 8, generator=g) * 3, torch.randn(n, 2, 8, generator=g)
    full = kernels.stream_layer(q, k, v, 0.35, window, None, block, 4, 6)
    lean = kernels.stream_layer(q, k, None, 0.35, window, None, block, 4, 6)
    assert lean[0].shape == (0, 4, 8)
    for a, b in zip(full[1:4], lean[1:4]):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-6)  # float sums per thread: the tile order may differ


@needs_kernel
def test_stream_layer_without_counterfactual_returns_an_empty_sink_pre():
    q, k = torch.randn(20, 3, 8), torch.randn(20, 1, 8)
    *_, sink_pre, inp_signed, inp_abs, token_match = kernels.stream_layer(q, k, k, 0.3, None, None, 8, 4, 4)[:8]
    assert sink_pre.shape == (0, 20) and inp_signed.shape == inp_abs.shape == (0, 4) and token_match.shape == (0, 3)


def test_a_failed_build_is_an_error_when_the_kernel_is_required(tmp_path, monkeypatch):
    monkeypatch.setenv("INTERP_CACHE", str(tmp_path))  # nothing cached there: forces a build
    monkeypatch.setenv("CXX", "false")  # a "compiler" that always fails
    monkeypatch.setenv("INTERP_KERNEL", "1")
    monkeypatch.setattr(kernels, "_STATE", {})
    with pytest.raises(RuntimeError, match="required .*did not build"):
        kernels.available()
    monkeypatch.setenv("INTERP_KERNEL", "auto")  # default: warn and use the Python path
    monkeypatch.setattr(kernels, "_STATE", {})
    with pytest.warns(UserWarning, match="slower Python path"):
        assert kernels.available() is False


def test_interp_kernel_0_selects_the_python_path(monkeypatch):
    monkeypatch.setenv("INTERP_KERNEL", "0")
    assert kernels.available() is False


@needs_kernel
def test_bad_shapes_and_dtypes_are_errors_not_crashes():
    q, k = torch.randn(10, 4, 8), torch.randn(10, 3, 8)  # 4 query heads cannot share 3 kv heads
    with pytest.raises(ShapeError, match="head % kv_head"):
        kernels.stream_layer(q, k, k, 0.3, None, None, 4, 4, 4)
    k = torch.randn(10, 2, 8)
    with pytest.raises(RuntimeError, match="float32"):
        kernels.stream_layer(q.double(), k.double(), k.double(), 0.3, None, None, 4, 4, 4)
    with pytest.raises(RuntimeError, match="block must be"):
        kernels.stream_layer(q, k, k, 0.3, None, None, 0, 4, 4)


def _inp_reference(q, k, skip, window, pairing):
    """``[2, head, freq]`` signed and absolute per-plane products summed over visible pairs (brute force, float64)."""
    from interp.rope import plane_channels

    N, H, D = q.shape
    kx = expand_kv(k, H).double()
    ch = plane_channels(D, pairing)
    # [head, q_pos, k_pos, freq]
    prod = (q.double()[:, :, ch[:, 0]].permute(1, 0, 2)[:, :, None] * kx[:, :, ch[:, 0]].permute(1, 0, 2)[:, None]
            + q.double()[:, :, ch[:, 1]].permute(1, 0, 2)[:, :, None] * kx[:, :, ch[:, 1]].permute(1, 0, 2)[:, None])
    i, j = torch.arange(N)[:, None], torch.arange(N)[None, :]
    ok = (j <= i) & (j >= skip) & ((i - j < window) if window else True)
    prod = prod * ok[None, :, :, None]
    return torch.stack([prod.sum((1, 2)), prod.abs().sum((1, 2))])


@needs_kernel
@settings(max_examples=15, deadline=None)
@given(n=st.integers(1, 60), block=st.integers(1, 20), window=st.sampled_from([None, 7]), d=st.sampled_from([8, 40, 64]),
       pairing=st.sampled_from(["rotate_half", "interleaved"]), seed=st.integers(0, 2**16))
def test_stream_layer_inp_sums_equal_brute_force(n, block, window, d, pairing, seed):
    """Per-plane InP sums (004 eq. 8-9) over visible pairs with keys >= skip, both pairings, vector and scalar tails."""
    g = torch.Generator().manual_seed(seed)
    q, k = torch.randn(n, 6, d, generator=g), torch.randn(n, 2, d, generator=g)
    got = kernels.stream_layer(q, k, None, 0.3, window, None, block, 4, 4, inp_pairing=pairing)
    ref = _inp_reference(q, k, 4, window, pairing)
    torch.testing.assert_close(got[5], ref[0], atol=1e-3, rtol=1e-5)
    torch.testing.assert_close(got[6], ref[1], atol=1e-3, rtol=1e-5)


def test_kernel_cache_follows_xdg_cache_home_and_interp_cache_wins(monkeypatch, tmp_path):
    monkeypatch.delenv("INTERP_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert kernels._cache_dir() == tmp_path / "xdg" / "interp" / "kernels"  # same root as the model cache
    from interp.models import cache_dir

    assert kernels._cache_dir().parent == cache_dir()
    monkeypatch.setenv("INTERP_CACHE", str(tmp_path / "mine"))
    assert kernels._cache_dir() == tmp_path / "mine" / "kernels"
    monkeypatch.delenv("INTERP_CACHE")
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert kernels._cache_dir() == tmp_path / "home" / ".cache" / "interp" / "kernels"


def _row_products_reference(q, k, scale, window, softcap):
    """``lse [head, pos]``, ``entropy [head, 2]``, ``key_mass [head, pos]`` from full patterns (float64)."""
    from interp.attention import _grouped, _logits, _visible

    N, H, _ = q.shape
    s = _logits(_grouped(q.double(), k.shape[1]), k.double().permute(1, 2, 0), scale, softcap).reshape(H, N, N)
    pos = torch.arange(N)
    s = s.masked_fill(~_visible(pos, pos, window), float("-inf"))
    A = torch.softmax(s, -1)
    ent = torch.special.entr(A).sum(-1)
    n = _visible(pos, pos, window).sum(-1).double()
    norm = torch.where(n > 1, ent / n.log().clamp(min=1e-300), torch.zeros_like(ent))
    return torch.logsumexp(s, -1), torch.stack([ent.sum(-1), norm.sum(-1)], -1), A.sum(1)


def _python_path(q, k, scale, window, softcap, block, rows=("lse", "entropy", "key_mass")):
    """The collector's Python block path (``Collector._blocks``) on raw tensors."""
    from types import SimpleNamespace

    from interp.engine.collector import Collector

    c = Collector.__new__(Collector)
    c.cfg = SimpleNamespace(block_size=block, skip=4, map_size=4)
    c.card = SimpleNamespace(n_heads=q.shape[1])
    return c._blocks(q, k, None, scale, window, softcap, None, frozenset(rows))[-1]


@settings(max_examples=25, deadline=None)
@given(**SHAPES)
def test_row_products_kernel_python_path_and_patterns_agree(n, kv, group, d, block, window, softcap, seed):
    """lse, entropy and key_mass (interp.measures.PRODUCTS): fused kernel == Python block path == materialised pattern."""
    g = torch.Generator().manual_seed(seed)
    H = kv * group
    q, k = torch.randn(n, H, d, generator=g) * 3, torch.randn(n, kv, d, generator=g) * 3
    scale = d**-0.5
    ref = dict(zip(("lse", "entropy", "key_mass"), _row_products_reference(q, k, scale, window, softcap)))
    engines = {"python": _python_path(q, k, scale, window, softcap, block)}
    if kernels.available():
        got = kernels.stream_layer(q, k, None, scale, window, softcap, block, 4, 4, lse=True, entropy=True, key_mass=True)
        engines["fused-cpu"] = dict(zip(("lse", "entropy", "key_mass"), got[8:]))
    for engine, prods in engines.items():
        assert prods["lse"].dtype == torch.float32 and prods["entropy"].dtype == prods["key_mass"].dtype == torch.float64
        for name in ("lse", "entropy", "key_mass"):
            # float32 probabilities: 1e-5 per entry; entropy sums n rows of float32 terms
            atol = 1e-5 * max(1.0, float(ref[name].abs().max())) if name != "lse" else 2e-5 * max(1.0, float(ref[name].abs().max()))
            torch.testing.assert_close(prods[name].double(), ref[name], atol=atol, rtol=1e-5,
                                       msg=lambda m, e=engine, nm=name: f"{e} {nm}: {m}")


@needs_kernel
def test_row_products_are_empty_unless_asked_for():
    q, k = torch.randn(20, 4, 8), torch.randn(20, 2, 8)
    got = kernels.stream_layer(q, k, k, 0.3, None, None, 8, 4, 4)
    assert len(got) == 11 and got[8].shape == (0, 20) and got[9].shape == (0, 2) and got[10].shape == (0, 20)
    assert _python_path(q, k, 0.3, None, None, 8, rows=()) == {}
    lean = kernels.stream_layer(q, k, k, 0.3, None, None, 8, 4, 4, entropy=True)  # one product alone
    assert got[8].shape == (0, 20) and lean[9].shape == (4, 2) and lean[10].shape == (0, 20)
    # the other reductions do not change (up to float rounding: the threads' per-lag partial sums are added in the
    # order the dynamic OpenMP schedule hands out tiles)
    torch.testing.assert_close(lean[1], got[1], rtol=1e-6, atol=1e-6)


@needs_kernel
@settings(max_examples=25, deadline=None)
@given(**SHAPES, rows=st.integers(1, 40), key=st.sampled_from([0, 1, 3]))
def test_key_weight_rows_equals_the_full_pattern(n, kv, group, d, block, window, softcap, seed, rows, key):
    """The kernel's sampled-row weights on one key (the scan's default pre-RoPE counterfactual) are the pattern's
    entries ``A[h, rows, key]``, computed from the materialised pattern; 0 where the key is masked."""
    from interp.attention import stratified_rows

    g = torch.Generator().manual_seed(seed)
    H = kv * group
    q, k = torch.randn(n, H, d, generator=g) * 3, torch.randn(n, kv, d, generator=g) * 3
    r, _ = stratified_rows(n, rows, seed)
    got = kernels.key_weight_rows(q, k, r, d**-0.5, window, softcap, key=key)
    A = attention_pattern(q, k, d**-0.5, window, softcap)  # [head, q_pos, k_pos]
    want = A[:, r, key] if key < n else torch.zeros(H, len(r))
    torch.testing.assert_close(got.double(), want.double(), atol=1e-5, rtol=0)


@needs_kernel
def test_key_weight_rows_refuses_unsorted_rows_and_bad_shapes():
    q, k = torch.randn(10, 4, 8), torch.randn(10, 2, 8)
    with pytest.raises(RuntimeError, match="sorted"):
        kernels.key_weight_rows(q, k, torch.tensor([5, 2]), 0.3, None, None)
    with pytest.raises(ShapeError):
        kernels.key_weight_rows(q, torch.randn(10, 3, 8), torch.tensor([1, 2]), 0.3, None, None)
