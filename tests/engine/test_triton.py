"""The Triton engine equals the materialised pattern and the fused CPU kernel on every reduction, every mask type,
GQA/MQA, soft-cap and odd lengths. Without a GPU the kernels run in Triton's interpreter (``TRITON_INTERPRET=1``,
set by tests/conftest.py); tests marked ``cuda`` also run them on a GPU where there is one."""

import os
import subprocess
import sys

import pandas as pd
import pytest
import torch

from interp.attention import attention_pattern, token_match_masks
from interp.engine import ScanConfig, kernels, scan
from interp.engine.collector import check_engine
from interp.engine.kernels import triton_attention as ta
from interp.errors import ConfigError
from interp.measures.inp import inp_sums
from interp.models import load_model
from interp.rope.variants import parse_variant
from tests.engine.test_kernels import _reference

needs_triton = pytest.mark.skipif(not ta.available("cpu") and not ta.available("cuda"),
                                  reason="Triton is not installed (pip install -e '.[gpu]') or cannot run here")
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU on this machine")
pytestmark = needs_triton

DEV = "cuda" if torch.cuda.is_available() else "cpu"  # where the Triton kernels run (else the interpreter on CPU tensors)
DEVICES = [DEV]


def _check_all(q, k, v, tok, scale, window, softcap, block, skip=4, M=8, pass2="per-head"):
    """Every output of ``triton_attention.stream_layer`` against full patterns (``_reference``) and brute-force sums."""
    N, H, _ = q.shape
    r = ta.stream_layer(q, k, v, scale, window, softcap, block, skip, M, q_pre=q * 0.5, k_pre=k * 0.7, inp_pairing="rotate_half",
                        tokens=tok, entropy=True, key_mass=True, pass2=pass2)
    out, lag, key0, amap, key0_pre = _reference(q.cpu(), k.cpu(), v.cpu(), (q * 0.5).cpu(), (k * 0.7).cpu(), scale,
                                                window, softcap, skip, M)
    A = attention_pattern(q.cpu(), k.cpu(), scale, window, softcap).double()
    tm = torch.einsum("hij,tij->ht", A, token_match_masks(tok.cpu(), 0, N).flip(-1).double())
    ent = -(A * torch.log(A.clamp_min(1e-300))).sum(-1)  # [head, pos]
    n_vis = torch.arange(1, N + 1).clamp(max=window or N)
    norm = torch.where(n_vis > 1, ent / torch.log(n_vis.clamp(min=2).double()), torch.zeros(()))
    inp = inp_sums(q.cpu(), k.cpu(), "rotate_half", skip, window, 8)
    close = lambda a, b, tol=2e-5: torch.testing.assert_close(a.cpu().double(), b.double(), rtol=tol, atol=tol)  # noqa: E731
    close(r["out"], out)
    close(r["lag"], lag)
    close(r["key0"], key0)
    close(r["map"], amap)
    close(r["key0_pre"], key0_pre)
    close(r["token_match"], tm)
    close(r["entropy"], torch.stack([ent.sum(1), norm.sum(1)], 1), 1e-4)
    close(r["key_mass"], A.sum(1))
    close(r["inp_signed"], inp["signed"], 1e-4)
    close(r["inp_abs"], inp["abs"], 1e-4)
    close(torch.logsumexp(torch.log(A.clamp_min(1e-300)), -1), torch.zeros(H, N, dtype=torch.float64), 1e-5)  # rows sum to 1
    return r


@pytest.mark.parametrize("pass2", ta.PASS2)
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("n, heads, kv, d, window, softcap", [
    (37, 4, 2, 16, None, None),  # GQA, a length that is not a multiple of the tile
    (40, 3, 1, 8, None, 3.0),  # MQA, soft-cap, d_head below the 16-wide dot
    (45, 2, 2, 24, 9, None),  # sliding window (several diagonals invisible), d_head not a power of two
    (33, 4, 4, 16, 5, 2.0),  # window shorter than a tile, soft-cap
    (1, 2, 1, 16, None, None),  # one token
    (41, 6, 2, 16, 20, None),  # three query heads per kv head: packed rows padded to four heads
])
def test_triton_equals_full_patterns(device, n, heads, kv, d, window, softcap, pass2):
    g = torch.Generator().manual_seed(n)
    q, k, v = (torch.randn(n, h, d, generator=g).to(device) for h in (heads, kv, kv))
    tok = torch.randint(0, 5, (n,), generator=g).to(device)
    _check_all(q, k, v, tok, 0.4, window, softcap, block=16, pass2=pass2)


def test_triton_equals_the_cpu_kernel():
    if not kernels.available():
        pytest.skip("the fused CPU kernel did not build here")
    g = torch.Generator().manual_seed(1)
    q, k, v = torch.randn(50, 4, 16, generator=g), torch.randn(50, 2, 16, generator=g), torch.randn(50, 2, 16, generator=g)
    tok = torch.randint(0, 4, (50,), generator=g)
    d = lambda t: t.to(DEV)  # noqa: E731
    r = ta.stream_layer(d(q), d(k), d(v), 0.3, 11, 4.0, 16, 4, 8, q_pre=d(q.flip(0)), k_pre=d(k.flip(0)), inp_pairing="rotate_half", tokens=d(tok))
    c = kernels.stream_layer(q, k, v, 0.3, 11, 4.0, 7, 4, 8, q.flip(0), k.flip(0), inp_pairing="rotate_half", tokens=tok)
    for name, ref in zip(["out", "lag", "key0", "map", "key0_pre", "inp_signed", "inp_abs", "token_match"], c):
        torch.testing.assert_close(r[name].cpu().double(), ref.double(), rtol=2e-5, atol=2e-5, msg=name)


def test_without_v_the_reductions_are_the_same():
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(30, h, 16, generator=g).to(DEV) for h in (2, 1, 1))
    a = ta.stream_layer(q, k, v, 0.5, None, None, 16, 4, 8)
    b = ta.stream_layer(q, k, None, 0.5, None, None, 16, 4, 8)
    assert b["out"] is None
    for name in ("lag", "key0", "map"):
        torch.testing.assert_close(a[name], b[name], rtol=1e-6, atol=1e-7)


def test_a_bad_tile_is_refused():
    q = torch.randn(4, 2, 16)
    with pytest.raises(ValueError, match="power of two"):
        ta.stream_layer(q, q, q, 1.0, None, None, 24, 4, 8)


@pytest.mark.parametrize("name, cfg", [
    ("tiny-llama", ScanConfig(inp=True, token_match=True)),  # GQA, every product but variants
    ("tiny-gemma2", ScanConfig(token_match=True)),  # soft-cap, sliding window on alternate layers
    ("tiny-gemma3", ScanConfig(shape=True)),  # MQA, QK-norm, sliding window; lse, entropy and key_mass products
    ("tiny-cohere", ScanConfig(inp=True, variants=(parse_variant("p-rope:0.5"),))),  # interleaved pairing (InP channels permuted), variants
])
def test_scan_on_triton_equals_the_cpu_kernel(name, cfg):
    m = load_model(name, device="cpu")
    toks = [torch.randint(0, 200, (n,), generator=torch.Generator().manual_seed(n)) for n in (21, 33)]
    ref = scan(m, toks, cfg, engine="cpu-kernel" if kernels.available() else "python")
    got = scan(m.to(DEV), toks, cfg, engine="triton")
    m.to("cpu")
    assert got.meta["engine"] == "triton"
    assert set(got.state) == set(ref.state)
    for key in ref.state:  # the layers' outputs differ by float rounding, which the next layers carry: a relative bound
        scale = float(ref.state[key].abs().max()) if ref.state[key].numel() else 0.0
        torch.testing.assert_close(got.state[key], ref.state[key], rtol=1e-4, atol=1e-6 * max(scale, 1.0), msg=key)
    pd.testing.assert_frame_equal(got.heads, ref.heads, rtol=1e-4, atol=1e-5)


@pytest.mark.skipif(ta.interpreter_problem() is not None, reason=str(ta.interpreter_problem()))
def test_cli_scan_with_the_triton_engine_equals_the_cpu_kernel(tmp_path):
    """The issue's acceptance command: ``interp scan tiny-llama --device cpu --engine triton`` (interpreter)."""
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    outs = {}
    for engine in ("triton", "auto"):
        out = tmp_path / engine
        res = subprocess.run([sys.executable, "-m", "interp.cli", "scan", "tiny-llama", "--device", "cpu", "--engine", engine,
                              "--prompts", "2", "--tokens", "24", "--out", str(out)], capture_output=True, text=True, env=env)
        assert res.returncode == 0, res.stderr[-2000:]
        outs[engine] = pd.read_csv(out / "heads.csv")
    pd.testing.assert_frame_equal(outs["triton"], outs["auto"], rtol=1e-4, atol=1e-5)


def test_an_interpreter_that_numpy_breaks_is_refused_in_one_line(monkeypatch):
    """Triton before 3.7 under NumPy 2.4 (triton-lang/triton#9171): the interpreter counts as unavailable and
    ``--engine triton`` on a CPU says why and what to install, instead of failing inside the first kernel."""
    import numpy as np

    monkeypatch.setattr(ta.triton, "__version__", "3.6.0")
    monkeypatch.setattr(np, "__version__", "2.4.6")
    assert "triton>=3.7" in ta.interpreter_problem()
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert not ta.available("cpu")
    with pytest.raises(ConfigError, match=r"Triton 3\.6\.0's interpreter fails under NumPy 2\.4\.6.*triton>=3\.7"):
        check_engine("triton", "cpu")
    monkeypatch.setattr(np, "__version__", "2.3.1")
    assert ta.interpreter_problem() is None
    monkeypatch.setattr(ta.triton, "__version__", "3.7.0+git1234")
    monkeypatch.setattr(np, "__version__", "2.4.6")
    assert ta.interpreter_problem() is None


def test_engine_errors_are_one_line(monkeypatch):
    with pytest.raises(ConfigError, match="unknown engine 'cuda-magic'"):
        check_engine("cuda-magic", "cpu")
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(ConfigError, match="TRITON_INTERPRET=1"):
        check_engine("triton", "cpu")


@needs_cuda
def test_bf16_scan_on_a_gpu_is_close_to_float32():
    """The bound the README quotes for bf16 scans: per-lag sums and sink weights of a bf16 triton scan against a
    float32 scan of the same model on the same GPU."""
    m32 = load_model("tiny-llama", device="cuda", dtype="float32")
    m16 = load_model("tiny-llama", device="cuda", dtype="bfloat16")
    toks = [torch.randint(0, 200, (300,), generator=torch.Generator().manual_seed(0))]
    a, b = scan(m32, toks, ScanConfig()), scan(m16, toks, ScanConfig())
    assert a.meta["engine"] == b.meta["engine"] == "triton"
    for col in ("slash_score", "sink_weight"):
        if col in a.heads:
            assert (a.heads[col] - b.heads[col]).abs().max() < 0.02


# ---- issue 34: the lag window, production tiles, entropy at long N, int64 offsets, degenerate windows, determinism ----

def test_diagonals_are_exactly_those_holding_the_asked_lags():
    """``diagonals`` against its definition: diagonal t's tiles hold the lags t T + r - c (r, c in 0..T-1)."""
    for N, T, window, lags in [(300, 16, None, ((0, 20), (100, 130))), (300, 16, 40, ((0, 5), (60, 70))), (64, 64, None, ((0, 63),)),
                               (1000, 64, None, ((0, 63), (500, 600)))]:
        n_qb = -(-N // T)
        want = []
        for t in range(n_qb):
            held = {t * T + r - c for r in range(T) for c in range(T)} & set(range(0, N))
            if window is not None and min(held, default=N) >= window:
                continue
            if any(lo <= d <= hi for d in held for lo, hi in lags):
                want.append(t)
        assert ta.diagonals(N, T, window, lags) == want


@pytest.mark.parametrize("window", [None, 37])
def test_a_lag_window_keeps_its_lags_exact_and_skips_the_rest(window):
    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(150, h, 16, generator=g).to(DEV) for h in (4, 2, 2))
    full = ta.stream_layer(q, k, v, 0.4, window, None, 16, 4, 8)
    lags = ((0, 7), (60, 90))
    part = ta.stream_layer(q, k, v, 0.4, window, None, 16, 4, 8, lags=lags)
    inside = torch.zeros(150, dtype=torch.bool)
    for lo, hi in lags:
        inside[lo : hi + 1] = True
    torch.testing.assert_close(part["lag"][:, inside], full["lag"][:, inside], rtol=1e-6, atol=1e-7)
    far = torch.arange(150) > 90 + 2 * 16  # beyond every diagonal of the window's lags: never computed
    assert float(part["lag"][:, far].abs().max()) == 0.0
    for name in ("out", "key0", "map", "lse"):  # the reductions that do not depend on the visited tiles
        torch.testing.assert_close(part[name], full[name])


@pytest.mark.parametrize("bm, bn", [(128, 64), (128, 128), (64, 64), (64, 32)])
@pytest.mark.parametrize("window", [None, 100])
def test_pass1_at_the_gpu_tile_shapes(bm, bn, window):
    """Pass 1 with every tile shape the GPU autotuner may pick (query block bm, key block bn), across the unmasked
    interior, the diagonal and the window's lower edge, against the materialised pattern."""
    g = torch.Generator().manual_seed(bm + bn)
    N, H, KV, D = 300, 4, 2, 16
    q, k, v = (torch.randn(N, h, D, generator=g) for h in (H, KV, KV))
    out, lse = ta.triton_forward(q.to(DEV), k.to(DEV), v.to(DEV), 0.3, window, None, block=(bm, bn))
    ref_out, *_ = _reference(q, k, v, q, k, 0.3, window, None, 4, 8)
    A = attention_pattern(q, k, 0.3, window, None)
    torch.testing.assert_close(out.cpu(), ref_out, rtol=2e-5, atol=2e-5)
    s = torch.einsum("ihd,jhd->hij", q, k.repeat_interleave(H // KV, 1)) * 0.3
    ref_lse = torch.logsumexp(s.masked_fill(A == 0, float("-inf")), -1)
    torch.testing.assert_close(lse.cpu(), ref_lse, rtol=1e-5, atol=1e-5)


def test_pass2_at_the_gpu_tile():
    """Pass 2 with the GPU's lag tile (``LAG_TILE`` = 64) on a prompt of several tiles: every reduction."""
    g = torch.Generator().manual_seed(64)
    q, k, v = (torch.randn(150, h, 16, generator=g).to(DEV) for h in (4, 2, 2))
    tok = torch.randint(0, 5, (150,), generator=g).to(DEV)
    _check_all(q, k, v, tok, 0.4, None, None, block=ta.LAG_TILE)


@pytest.mark.parametrize("heads, kv, window", [(8, 2, None), (7, 1, 90), (4, 4, None)])
def test_packed_pass2_at_the_gpu_tiles(heads, kv, window):
    """The packed pass 2 at the tiles a GPU gives it (``pass2_tile(..., block=None)``: Llama's four query heads per kv
    head at 64 x 64 / 32 x 32, Qwen2.5's seven padded to eight at 32 x 32 / 16 x 16, one head per kv head), every
    reduction."""
    for name in ("packed", "packed-small"):
        GP, T = ta.pass2_tile(name, heads // kv, None)
        assert GP * T <= ta.PASS2_ROWS[name] and T & (T - 1) == 0 and GP >= heads // kv
        g = torch.Generator().manual_seed(heads)
        q, k, v = (torch.randn(2 * T + 9, h, 16, generator=g).to(DEV) for h in (heads, kv, kv))
        tok = torch.randint(0, 5, (q.shape[0],), generator=g).to(DEV)
        _check_all(q, k, v, tok, 0.4, window, None, block=T, pass2=name)


def test_pass2_variants_agree_on_the_asked_lags():
    """Per-head and packed kernels give the same lag sums on a lag window (float32 addition order apart), and an
    unknown variant is refused before any work."""
    g = torch.Generator().manual_seed(9)
    q, k, v = (torch.randn(200, h, 16, generator=g).to(DEV) for h in (8, 2, 2))
    lags = ((0, 7), (60, 90))
    a, *rest = (ta.stream_layer(q, k, v, 0.4, None, None, 16, 4, 8, lags=lags, pass2=p) for p in ta.PASS2)
    assert all(ta._agree((b["lag"],), (a["lag"],), lags) for b in rest)
    with pytest.raises(ValueError, match="unknown pass-2 variant"):
        ta.stream_layer(q, k, v, 0.4, None, None, 16, 4, 8, pass2="fused")


def test_the_pass2_choice_keeps_the_fastest_variant_that_agrees(monkeypatch):
    """``_pass2_choice`` (what a GPU does on each shape's first layer), with the CUDA timer replaced by scripted times:
    the faster variant is kept; one that disagrees with the per-head kernel or raises is dropped."""
    from interp.engine.kernels import sdpa_lse

    g = torch.Generator().manual_seed(4)
    q, k = (torch.randn(40, h, 16, generator=g).to(DEV) for h in (8, 2))  # four query heads per kv head: three distinct tiles
    a = ta._args(q, k, 0.4, None, None)
    flags = dict(lag=True, tokens=False, entropy=False, key_mass=False, inp=False)
    lse = ta.triton_forward(q, k, None, 0.4, None, None, block=16)[1]
    honest = lambda name: ta._pass2(name, q, k, lse, None, a, None, 16, 4, None, flags)  # noqa: E731
    times = {"per-head": 2.0, "packed": 1.0, "packed-small": 1.5}
    monkeypatch.setattr(sdpa_lse, "cuda_ms", lambda fn: (times[fn.__defaults__[0]], fn()))
    monkeypatch.delenv("INTERP_PASS2", raising=False)

    def choose(run):
        ta._PASS2_CHOICE.clear()
        return ta._pass2_choice(q, k, a, flags, None, run)

    assert choose(honest) == "packed"
    times.update({"per-head": 0.5})
    assert choose(honest) == "per-head"
    times.update({"per-head": 2.0})
    wrong = lambda name: tuple(x * 1.01 if x is not None and name == "packed" else x for x in honest(name))  # noqa: E731
    assert choose(wrong) == "packed-small"

    def broken(name):
        if name != "per-head":
            raise RuntimeError("out of shared memory")
        return honest(name)

    assert choose(broken) == "per-head"
    assert set(ta.pass2_choices().popitem()[1]["ms"]) == {"per-head"}
    ta._PASS2_CHOICE.clear()


def test_a_scan_with_the_packed_pass2_equals_the_cpu_kernel(monkeypatch):
    """``INTERP_PASS2=packed`` runs every layer's pass 2 packed by kv head (tiny-llama: GQA): ``heads`` as the CPU engine."""
    m = load_model("tiny-llama", device="cpu")
    toks = [torch.randint(0, 200, (n,), generator=torch.Generator().manual_seed(n)) for n in (21, 40)]
    cfg = ScanConfig(token_match=True)
    ref = scan(m, toks, cfg, engine="cpu-kernel" if kernels.available() else "python")
    monkeypatch.setenv("INTERP_PASS2", "packed")
    got = scan(m.to(DEV), toks, cfg, engine="triton")
    m.to("cpu")
    pd.testing.assert_frame_equal(got.heads, ref.heads, rtol=1e-4, atol=1e-5)
    monkeypatch.setenv("INTERP_PASS2", "fused")
    with pytest.raises(ValueError, match="unknown pass-2 variant"):
        ta.stream_layer(toks[0][:, None, None].float().expand(21, 2, 16), torch.zeros(21, 1, 16), None, 1.0, None, None, 16, 4, 8)


def test_entropy_at_long_n_with_peaked_attention():
    """Row entropy as sum_j A (lse - s): at 2048 tokens with peaked rows and logits near 300 (where ``lse - sum_j A s``
    would subtract two numbers of that size in float32) the sum equals a float64 recomputation."""
    g = torch.Generator().manual_seed(7)
    N, D = 2048, 16
    u = torch.zeros(D)
    u[0] = 1.0
    q = torch.randn(N, 1, D, generator=g) * 3 + 30 * u  # q . u = 30: every logit of a row shifted by 30 * 40 * scale
    k = torch.randn(N, 1, D, generator=g) * 3 + 40 * u
    r = ta.stream_layer(q.to(DEV), k.to(DEV), None, 0.25, None, None, 64, 4, 8, entropy=True, lag=False)
    s = (q[:, 0].double() @ k[:, 0].double().T) * 0.25
    s = s.masked_fill(torch.ones(N, N, dtype=torch.bool).triu(1), float("-inf"))
    logp = s - torch.logsumexp(s, -1, keepdim=True)
    ent = -(logp.exp() * logp.nan_to_num(neginf=0.0)).sum(-1)
    assert float(s.max()) > 250
    assert float(ent.mean()) < 1.5  # peaked rows
    n_vis = torch.arange(1, N + 1).double()
    norm = torch.where(n_vis > 1, ent / torch.log(n_vis.clamp(min=2)), torch.zeros(()))
    got = r["entropy"].cpu()[0]
    assert abs(float(got[0]) - float(ent.sum())) < 1e-3 * N * 0.01 + 1e-4 * float(ent.sum())
    assert abs(float(got[1]) - float(norm.sum())) < 1e-3 * N * 0.01 + 1e-4 * float(norm.sum())


def test_offsets_are_int64():
    """A query tensor whose row stride times the last row passes 2^31 elements (a 4 GB float16 view, reserved but
    almost never touched): int32 offsets would wrap and read the wrong rows."""
    N, H, D = 20, 2, 16
    stride = 2**31 // (N - 1) + 1024
    try:
        base = torch.empty(stride * (N - 1) + H * D, dtype=torch.float16, device=DEV)
    except (RuntimeError, MemoryError):
        pytest.skip("cannot reserve a 4 GB view here")
    q = base.as_strided((N, H, D), (stride, D, 1))
    g = torch.Generator().manual_seed(3)
    q0 = torch.randn(N, H, D, generator=g).half()
    q.copy_(q0.to(DEV))
    k, v = (torch.randn(N, 1, D, generator=g).half().to(DEV) for _ in range(2))
    out, lse = ta.triton_forward(q, k, v, 0.25, None, None, block=16)
    out_c, lse_c = ta.triton_forward(q0.to(DEV), k, v, 0.25, None, None, block=16)
    torch.testing.assert_close(lse.cpu(), lse_c.cpu())
    torch.testing.assert_close(out.cpu(), out_c.cpu())


def test_a_window_that_hides_every_key_is_refused():
    q = torch.randn(8, 2, 16)
    for fn in (lambda: ta.stream_layer(q, q, q, 1.0, 0, None, 16, 4, 8), lambda: ta.triton_forward(q, q, q, 1.0, 0, None, 16)):
        with pytest.raises(ValueError, match="window >= 1"):
            fn()


def test_lag_sums_are_reproducible_within_a_bound():
    """Per-lag sums are added with float atomics (two diagonals share a lag): identical under the interpreter, and on a
    GPU equal run to run within float32 addition-order rounding."""
    g = torch.Generator().manual_seed(11)
    q, k, v = (torch.randn(400, h, 16, generator=g).to(DEV) for h in (4, 2, 2))
    a, b = (ta.stream_layer(q, k, v, 0.4, None, None, 16, 4, 8, key_mass=True) for _ in range(2))
    for name in ("lag", "key_mass"):
        if DEV == "cpu":
            assert torch.equal(a[name], b[name])
        torch.testing.assert_close(a[name], b[name], rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(a["out"], b["out"], rtol=0, atol=0)


@needs_cuda
def test_pass1_backends_agree_and_the_pick_is_recorded():
    """On a GPU pass 1 may come from cuDNN or FlashAttention (``sdpa_lse``): whichever was picked, its output and
    log-sum-exp equal the Triton forward's to bf16 rounding, and ``choices()`` names it with the times measured."""
    from interp.engine.kernels import sdpa_lse

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1000, h, 128, generator=g).bfloat16().cuda() for h in (8, 2, 2))
    out, lse = ta.forward(q, k, v, 128**-0.5)
    ref_out, ref_lse = ta.triton_forward(q, k, v, 128**-0.5, block=(64, 64))
    torch.testing.assert_close(lse, ref_lse, rtol=0, atol=2e-2)
    torch.testing.assert_close(out.float(), ref_out.float(), rtol=0, atol=2e-2)
    picked = [c for key, c in sdpa_lse.choices().items() if key.startswith("pos<=1024 h8 kv2 d128")]
    assert picked and picked[0]["picked"] in picked[0]["ms"]
    print(sdpa_lse.choices())
