"""The scan's GPU kernel: a Triton twin of the fused CPU kernel (``stream_attention.cpp``).

Same contract as ``interp.engine.kernels.stream_layer`` (exact attention of one layer, the output ``P @ V`` and
the tile reductions from the same probabilities), for CUDA tensors in float32, bfloat16 or float16, with float32
accumulation; under ``TRITON_INTERPRET=1`` the same kernels run on CPU tensors (the tests).

Design: two passes, the simple exact one.

1. ``_forward_kernel``, one program per (query block, head): flash attention's forward (online max and sum) giving
   the layer's output ``P @ V`` and each row's log-sum-exp ``lse_i = log sum_j exp(s_ij)`` of the scaled,
   soft-capped, masked logits (without v: ``lse`` only, for the counterfactual passes).
2. ``_stats_kernel``, one program per (diagonal of tiles, head): the tiles (query block b, key block b - t) for every
   b, recomputed; ``A_ij = exp(s_ij - lse_i)`` is then the exact probability (not an online estimate). Every tile of
   a diagonal puts its entries on the same ``2T - 1`` lags, so the program adds the tiles in one register tile and
   shears it once at the end (``tl.gather``) into per-lag sums; the key-0 column and the map are plain stores,
   column sums per-key atomics, and token-match sums, row entropy and per-plane InP order-free totals.

Why two passes and not one online pass: flash attention's single pass rescales its running ``P @ V`` when the
row maximum grows, which works for a linear accumulator but not for the tile reductions (a per-lag sum mixes rows
whose normalisers are not known yet; entropy needs the final normaliser). The second pass costs one more ``Q K^T``
and ``exp`` per tile; storing unnormalised per-row sums and rescaling them at the end would need
``[head, pos, pos]``-sized buffers for the lag sums. Query-block programs for pass 2 (a gather and atomics per tile)
measured 6.6x PyTorch's sdpa per layer at 32k tokens on an H100; the diagonal programs 3.2x. ``Q K^T`` and ``P @ V``
run on tensor cores in the inputs' dtype (float32 inputs in IEEE float32, so float32 scans are exact).

The pre-RoPE key-0 weight reuses pass 1 on the pre-RoPE vectors: ``A_pre[i, 0] = exp(s_pre[i, 0] - lse_pre_i)``.

Low-level module: imports torch, triton (``available()`` is False without it) and ``interp.engine.kernels``' pairing helper.
"""

from __future__ import annotations

import math
import os

import torch

from interp.engine.kernels import rotate_half_planes

try:  # an optional extra: pip install -e '.[gpu]'
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - exercised where triton is absent
    triton = None

LAG_TILE = 64  # queries and keys per tile of pass 2 on a GPU (the lag shear needs square tiles)


def _launch(d_head: int, block: int | None) -> tuple[dict, dict, int]:
    """Tile sizes and launch settings ``(pass-1 kwargs, pass-2 kwargs, T)``: a fixed ``block`` (the interpreter, the
    tests) or, on a GPU, the flash-attention tutorial's Hopper settings for pass 1 and 64 x 64 tiles for pass 2."""
    if block is not None:
        return dict(BM=block, BN=block), {}, block
    big = d_head > 128  # a 128 x 256 query tile would spill registers
    return (dict(BM=64 if big else 128, BN=64, num_warps=4 if big else 8, num_stages=3),
            dict(num_warps=4, num_stages=3), LAG_TILE)


def interpreted() -> bool:
    """Whether Triton runs its interpreter (``TRITON_INTERPRET=1``): kernels execute on CPU tensors with numpy."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def available(device: torch.device | str | None = None) -> bool:
    """Whether the Triton kernels can run on ``device``: triton is installed and either the device is CUDA or
    ``TRITON_INTERPRET=1`` is set (then CPU tensors run through the interpreter)."""
    if triton is None:
        return False
    dev = torch.device(device) if device is not None else None
    if interpreted():
        return dev is None or dev.type == "cpu"
    return (dev is None or dev.type == "cuda") and torch.cuda.is_available()


if triton is not None:

    @triton.jit
    def _tile_logits(q, k, i, j, N, scale, softcap, window,
                     HAS_CAP: tl.constexpr, HAS_WIN: tl.constexpr, PREC: tl.constexpr):
        """Scaled, soft-capped logits of a [BM, BN] tile and its visibility mask (causal, window, j < N)."""
        s = tl.dot(q, tl.trans(k), input_precision=PREC) * scale
        if HAS_CAP:  # c * tanh(x / c), tanh through exp (exact at +-inf: 1 - 2 / (inf + 1) = 1)
            s = softcap * (1.0 - 2.0 / (tl.exp(2.0 * s / softcap) + 1.0))
        vis = (j[None, :] <= i[:, None]) & (j[None, :] < N)
        if HAS_WIN:
            vis = vis & ((i[:, None] - j[None, :]) < window)
        return s, vis

    @triton.jit
    def _key_start(i0, window, HAS_WIN: tl.constexpr, BN: tl.constexpr):
        """First key tile a query block can see (a multiple of BN)."""
        if HAS_WIN:
            return (tl.maximum(i0 - window + 1, 0) // BN) * BN
        return 0

    @triton.jit
    def _forward_kernel(Q, K, V, OUT, LSE, sq_n, sq_h, sk_n, sk_h, so_n, so_h, N, scale, softcap, window,
                        G: tl.constexpr, D: tl.constexpr, DP: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
                        HAS_CAP: tl.constexpr, HAS_WIN: tl.constexpr, PREC: tl.constexpr, HAS_V: tl.constexpr):
        """Pass 1, one block of BM queries of head h: ``LSE[h, i]`` (float32) and, with V, ``OUT = softmax(S) V`` (online)."""
        pid, h = tl.program_id(0), tl.program_id(1)
        kvh = h // G
        i0 = pid * BM
        i = i0 + tl.arange(0, BM)
        d = tl.arange(0, DP)
        row_ok = i < N
        q = tl.load(Q + i[:, None] * sq_n + h * sq_h + d[None, :], mask=row_ok[:, None] & (d[None, :] < D), other=0.0)
        m = tl.full([BM], float("-inf"), tl.float32)
        acc = tl.zeros([BM], tl.float32)
        o = tl.zeros([BM, DP], tl.float32)
        hi = tl.minimum(i0 + BM, N)
        for j0 in range(_key_start(i0, window, HAS_WIN, BN), hi, BN):
            j = j0 + tl.arange(0, BN)
            k = tl.load(K + j[:, None] * sk_n + kvh * sk_h + d[None, :], mask=(j[:, None] < N) & (d[None, :] < D), other=0.0)
            s, vis = _tile_logits(q, k, i, j, N, scale, softcap, window, HAS_CAP, HAS_WIN, PREC)
            s = tl.where(vis, s, float("-inf"))
            m_new = tl.maximum(m, tl.max(s, axis=1))
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # rows with nothing visible yet
            alpha = tl.exp(m - m_safe)
            p = tl.exp(s - m_safe[:, None])
            acc = acc * alpha + tl.sum(p, axis=1)
            if HAS_V:
                v = tl.load(V + j[:, None] * sk_n + kvh * sk_h + d[None, :], mask=(j[:, None] < N) & (d[None, :] < D), other=0.0)
                o = o * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PREC)
            m = m_new
        acc = tl.where(row_ok, acc, 1.0)  # padding rows: no log(0)
        tl.store(LSE + h * N + i, m + tl.log(acc), mask=row_ok)
        if HAS_V:
            tl.store(OUT + i[:, None] * so_n + h * so_h + d[None, :], o / acc[:, None], mask=row_ok[:, None] & (d[None, :] < D))

    @triton.jit
    def _stats_kernel(Q, K, LSE, LAG, KEY0, MAP, TOK, TM, ENT, KMASS, INPS, INPA,
                      sq_n, sq_h, sk_n, sk_h, N, scale, softcap, window, skip, M, n_qb, n_diag,
                      G: tl.constexpr, D: tl.constexpr, DP: tl.constexpr, F: tl.constexpr, FP: tl.constexpr,
                      T: tl.constexpr, HAS_CAP: tl.constexpr, HAS_WIN: tl.constexpr, PREC: tl.constexpr,
                      DO_LAG: tl.constexpr, DO_KEY0: tl.constexpr, DO_MAP: tl.constexpr, DO_TM: tl.constexpr,
                      DO_ENT: tl.constexpr, DO_KMASS: tl.constexpr, DO_INP: tl.constexpr):
        """Pass 2, one tile diagonal of head h: the tiles (query block b, key block b - t) for every b, so that every
        tile puts its lag-``delta`` entries on the same ``2T - 1`` lags ``t T + (r - c)``. The program sums the tiles'
        probabilities into one ``[T, T]`` register tile and shears it once at the end (``tl.gather``), so per-lag sums
        cost one add per tile entry; the other reductions are order-free totals, per-key sums or plain stores."""
        t, h = tl.program_id(0), tl.program_id(1)
        kvh = h // G
        r = tl.arange(0, T)
        c = tl.arange(0, T)
        d = tl.arange(0, DP)
        f = tl.arange(0, FP)
        psum = tl.zeros([T, T], tl.float32)
        t_prev = tl.zeros([T], tl.float32)
        t_dup = tl.zeros([T], tl.float32)
        t_ind = tl.zeros([T], tl.float32)
        e_raw = tl.zeros([T], tl.float32)  # sum_j A_ij s_ij (row entropy = lse_i - this)
        e_norm = tl.zeros([T], tl.float32)  # the same over log(#visible keys of row i)
        inp_s = tl.zeros([FP], tl.float64)
        inp_a = tl.zeros([FP], tl.float64)
        for b in range(t, n_qb):
            i0 = b * T
            j0 = (b - t) * T
            i = i0 + r
            j = j0 + c
            row_ok = i < N
            q = tl.load(Q + i[:, None] * sq_n + h * sq_h + d[None, :], mask=row_ok[:, None] & (d[None, :] < D), other=0.0)
            k = tl.load(K + j[:, None] * sk_n + kvh * sk_h + d[None, :], mask=(j[:, None] < N) & (d[None, :] < D), other=0.0)
            lse = tl.load(LSE + h * N + i, mask=row_ok, other=0.0)
            s, vis = _tile_logits(q, k, i, j, N, scale, softcap, window, HAS_CAP, HAS_WIN, PREC)
            vis = vis & row_ok[:, None]
            p = tl.where(vis, tl.exp(s - lse[:, None]), 0.0)
            if DO_LAG:
                psum += tl.where(j[None, :] >= skip, p, 0.0)
            if DO_KEY0:
                if j0 == 0:
                    tl.store(KEY0 + h * N + i, tl.sum(tl.where(c[None, :] == 0, p, 0.0), axis=1), mask=row_ok)
            if DO_MAP:
                if i0 < M:
                    tl.store(MAP + (h * M + i[:, None]) * M + j[None, :], p, mask=(i[:, None] < M) & (j[None, :] < M))
            if DO_TM:  # TransformerLens head_detector patterns (interp.attention.token_match_masks)
                tok_i = tl.load(TOK + i, mask=row_ok, other=-1)
                tok_j = tl.load(TOK + j, mask=j < N, other=-2)
                tok_jm1 = tl.load(TOK + j - 1, mask=(j >= 1) & (j < N), other=-3)
                t_prev += tl.sum(tl.where(j[None, :] == i[:, None] - 1, p, 0.0), axis=1)
                t_dup += tl.sum(tl.where((j[None, :] < i[:, None]) & (tok_j[None, :] == tok_i[:, None]), p, 0.0), axis=1)
                t_ind += tl.sum(tl.where((j[None, :] >= 1) & (tok_jm1[None, :] == tok_i[:, None]), p, 0.0), axis=1)
            if DO_ENT:
                ps_row = tl.sum(tl.where(vis, p * s, 0.0), axis=1)
                n_vis = i + 1
                if HAS_WIN:
                    n_vis = tl.minimum(n_vis, window)
                w = tl.where(n_vis > 1, 1.0 / tl.log(tl.maximum(n_vis, 2).to(tl.float32)), 0.0)
                e_raw += ps_row
                e_norm += ps_row * w
            if DO_KMASS:
                tl.atomic_add(KMASS + h * N + j, tl.sum(p, axis=0), mask=j < N, sem="relaxed")
            if DO_INP:  # per-plane q.k over visible pairs with keys >= skip (planes (l, l + D/2)); not attention-weighted
                pair = vis & (j[None, :] >= skip)
                for l in range(0, F):
                    q1 = tl.load(Q + i * sq_n + h * sq_h + l, mask=row_ok, other=0.0).to(tl.float32)
                    q2 = tl.load(Q + i * sq_n + h * sq_h + l + F, mask=row_ok, other=0.0).to(tl.float32)
                    k1 = tl.load(K + j * sk_n + kvh * sk_h + l, mask=j < N, other=0.0).to(tl.float32)
                    k2 = tl.load(K + j * sk_n + kvh * sk_h + l + F, mask=j < N, other=0.0).to(tl.float32)
                    prod = tl.where(pair, q1[:, None] * k1[None, :] + q2[:, None] * k2[None, :], 0.0)
                    ps = tl.sum(tl.sum(prod, axis=1), axis=0).to(tl.float64)
                    pa = tl.sum(tl.sum(tl.abs(prod), axis=1), axis=0).to(tl.float64)
                    inp_s = tl.where(f == l, inp_s + ps, inp_s)
                    inp_a = tl.where(f == l, inp_a + pa, inp_a)
        if DO_LAG:  # entry (r, c) has lag t T + r - c: two half-tiles of lags, each a row-wise gather then a column sum
            u = tl.arange(0, T)
            idx_lo = r[:, None] + (T - 1) - u[None, :]  # lag t T - (T - 1) + u  (r - c <= 0)
            idx_hi = r[:, None] - 1 - u[None, :]  # lag t T + 1 + u  (r - c >= 1)
            lo = tl.sum(tl.where(idx_lo < T, tl.gather(psum, tl.minimum(idx_lo, T - 1), axis=1), 0.0), axis=0)
            hi = tl.sum(tl.where(idx_hi >= 0, tl.gather(psum, tl.maximum(idx_hi, 0), axis=1), 0.0), axis=0)
            lag_lo = t * T - (T - 1) + u
            lag_hi = t * T + 1 + u
            tl.atomic_add(LAG + h * N + lag_lo, lo, mask=(lag_lo >= 0) & (lag_lo < N), sem="relaxed")
            tl.atomic_add(LAG + h * N + lag_hi, hi, mask=(lag_hi >= 0) & (lag_hi < N), sem="relaxed")
        part = h * n_diag + t  # per-program partial totals, added up on the host side in a fixed order
        if DO_TM:
            tl.store(TM + part * 3 + 0, tl.sum(t_prev, axis=0).to(tl.float64))
            tl.store(TM + part * 3 + 1, tl.sum(t_dup, axis=0).to(tl.float64))
            tl.store(TM + part * 3 + 2, tl.sum(t_ind, axis=0).to(tl.float64))
        if DO_ENT:
            tl.store(ENT + part * 2 + 0, tl.sum(e_raw, axis=0).to(tl.float64))
            tl.store(ENT + part * 2 + 1, tl.sum(e_norm, axis=0).to(tl.float64))
        if DO_INP:
            tl.store(INPS + part * F + f, inp_s, mask=f < F)
            tl.store(INPA + part * F + f, inp_a, mask=f < F)


def _pow2(n: int) -> int:
    return 1 << max(0, math.ceil(math.log2(max(n, 1))))


def _precision(dtype: torch.dtype) -> str:
    """``tl.dot``'s input precision: IEEE for float32 inputs (exact float32 scans), the tensor cores' own for 16-bit."""
    return "ieee" if dtype == torch.float32 else "tf32"


def _args(q, k, scale, window, softcap):
    N, H, D = q.shape
    KV = k.shape[1]
    return dict(N=N, scale=float(scale), softcap=float(softcap or 1.0), window=int(window or 0),
                G=H // KV, D=D, DP=max(16, _pow2(D)), HAS_CAP=bool(softcap), HAS_WIN=window is not None,
                PREC=_precision(q.dtype))


def forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor | None, scale: float, window: int | None = None,
            softcap: float | None = None, block: int | None = None) -> tuple[torch.Tensor | None, torch.Tensor]:
    """Pass 1: ``(out [pos, head, d_head] float32 or None without v, lse [head, pos] float32)``.

    ``lse_i`` is the natural-log log-sum-exp of row i's scaled, soft-capped, masked logits; ``out`` the layer's
    attention output (online softmax, as flash attention). Args as ``stream_layer``. (PyTorch's own flash attention
    also returns ``lse``, but with the kv heads repeated for it and its output cast it measured slower on an H100:
    25.9 ms against 22.8 ms for this kernel at 32k tokens, Llama-3.1-8B's head shapes.)
    """
    N, H, D = q.shape
    a = _args(q, k, scale, window, softcap)
    lse = torch.empty(H, N, dtype=torch.float32, device=q.device)
    out = torch.empty(N, H, D, dtype=torch.float32, device=q.device) if v is not None else None
    so = (out.stride(0), out.stride(1)) if out is not None else (0, 0)
    kw, _, _ = _launch(D, block)
    _forward_kernel[(triton.cdiv(N, kw["BM"]), H)](
        q, k, v if v is not None else k, out if out is not None else lse, lse, q.stride(0), q.stride(1), k.stride(0),
        k.stride(1), so[0], so[1], N, a["scale"], a["softcap"], a["window"], G=a["G"], D=D, DP=a["DP"],
        HAS_CAP=a["HAS_CAP"], HAS_WIN=a["HAS_WIN"], PREC=a["PREC"], HAS_V=v is not None, **kw)
    return out, lse


def key0_weight(q: torch.Tensor, k: torch.Tensor, lse: torch.Tensor, scale: float, window: int | None,
                softcap: float | None) -> torch.Tensor:
    """``[head, pos]`` float32 ``A[i, 0] = exp(s_i0 - lse_i)`` (0 where key 0 is outside the window)."""
    N, H, _ = q.shape
    k0 = k[0].float().repeat_interleave(H // k.shape[1], dim=0)  # [head, d]
    s0 = torch.einsum("nhd,hd->hn", q.float(), k0) * scale
    if softcap:
        s0 = softcap * torch.tanh(s0 / softcap)
    w = torch.exp(s0 - lse)
    if window is not None:
        w[:, window:] = 0.0
    return w


def _row_weights(N: int, window: int | None, device) -> torch.Tensor:
    """``[pos]`` ``1 / log(#visible keys)`` of each row (0 for rows that see one key)."""
    n = torch.arange(1, N + 1, device=device, dtype=torch.float32)
    if window is not None:
        n = n.clamp(max=window)
    return torch.where(n > 1, 1.0 / torch.log(n.clamp(min=2)), torch.zeros_like(n))


def stream_layer(q, k, v, scale: float, window: int | None, softcap: float | None, block: int | None, skip: int, map_size: int,
                 q_pre=None, k_pre=None, inp_pairing: str | None = None, tokens=None, *, lag: bool = True, key0: bool = True,
                 amap: bool = True, entropy: bool = False, key_mass: bool = False):
    """One layer's exact attention and reductions on the Triton kernels (GPU, or CPU under ``TRITON_INTERPRET=1``).

    Pass 1 (``forward``) gives the output and the row normalisers; pass 2 recomputes each tile's logits and takes
    ``A = exp(s - lse)`` (exact) into the reductions (module docstring).

    Args:
        q: ``[pos, head, d_head]`` post-RoPE queries; k, v: ``[pos, kv_head, d_head]`` (float32, bfloat16 or float16,
            one device; ``v=None``: reductions only). scale, window, softcap, skip, map_size, q_pre, k_pre, tokens: as
            ``interp.engine.kernels.stream_layer``. block: queries and keys per tile (a power of two >= 16), or None for
            the GPU settings (``_launch``); the results do not depend on it beyond float rounding.
        inp_pairing: ``"rotate_half"`` or ``"interleaved"`` to also sum the per-plane InP, as the CPU kernel; None skips it.
        lag, key0, amap, entropy, key_mass: which reductions to compute (the others come back None).

    Returns:
        dict with ``out [pos, head, d_head]`` float32 (None without v), ``lse [head, pos]`` float32, ``lag [head, pos]``
        float64 (sum over queries of ``A[i, i - delta]``, keys >= skip), ``key0 [head, pos]`` float32 (``A[i, 0]``),
        ``map [head, M, M]`` float64 (``A[:M, :M]``), ``key0_pre [head, pos]`` float32 (with q_pre/k_pre), ``inp_signed``
        / ``inp_abs`` ``[head, freq]`` float64, ``token_match [head, 3]`` float64, ``entropy [head, 2]`` float64 (sums
        over queries of the row entropy in nats and of it over ``log(#visible keys)``), ``key_mass [head, pos]``
        float64 (column sums); a reduction not asked for is None.

    Raises:
        ValueError: ``block`` not a power of two >= 16, tensors on different devices, or an unknown pairing.
    """
    if block is not None and (block < 16 or block & (block - 1)):
        raise ValueError(f"the Triton kernel needs a tile that is a power of two >= 16, got {block}")
    if len({t.device for t in (q, k) + ((v,) if v is not None else ())}) != 1:
        raise ValueError("q, k and v must be on one device")
    inp = inp_pairing is not None
    q, k = rotate_half_planes(q, k, inp_pairing)
    N, H, D = q.shape
    F = D // 2
    a = _args(q, k, scale, window, softcap)
    dev = q.device
    q, k = q.contiguous(), k.contiguous()
    v = v.to(q.dtype).contiguous() if v is not None else None
    out, lse = forward(q, k, v, scale, window, softcap, block)
    _, kw2, block = _launch(D, block)
    n_qb = triton.cdiv(N, block)
    n_diag = n_qb if window is None else min(n_qb, (window + block - 2) // block + 1)
    f32 = dict(dtype=torch.float32, device=dev)
    f64 = dict(dtype=torch.float64, device=dev)
    M = min(map_size, N)
    lag_t = torch.zeros(H, N, **f32) if lag else None
    key0_t = torch.zeros(H, N, **f32) if key0 else None
    map_t = torch.zeros(H, M, M, **f32) if amap else None
    tm = torch.zeros(H, n_diag, 3, **f64) if tokens is not None else None
    ent = torch.zeros(H, n_diag, 2, **f64) if entropy else None
    km = torch.zeros(H, N, **f32) if key_mass else None
    inp_s = torch.zeros(H, n_diag, F, **f64) if inp else None
    inp_a = torch.zeros(H, n_diag, F, **f64) if inp else None
    tok = tokens.to(dev, torch.int64).contiguous() if tokens is not None else None
    pick = lambda t: lse if t is None else t  # noqa: E731  a stand-in for buffers a specialisation never touches
    _stats_kernel[(n_diag, H)](
        q, k, lse, pick(lag_t), pick(key0_t), pick(map_t), pick(tok), pick(tm), pick(ent), pick(km), pick(inp_s),
        pick(inp_a), q.stride(0), q.stride(1), k.stride(0), k.stride(1), N, a["scale"], a["softcap"], a["window"],
        int(skip), M, n_qb, n_diag, G=a["G"], D=D, DP=a["DP"], F=max(F, 1), FP=max(16, _pow2(F)), T=block,
        HAS_CAP=a["HAS_CAP"], HAS_WIN=a["HAS_WIN"], PREC=a["PREC"], DO_LAG=lag, DO_KEY0=key0, DO_MAP=amap,
        DO_TM=tokens is not None, DO_ENT=entropy, DO_KMASS=key_mass, DO_INP=inp, **kw2)
    res = {"out": out, "lse": lse, "lag": lag_t.double() if lag else None, "key0": key0_t, "map": None,
           "token_match": tm.sum(1) if tm is not None else None, "key_mass": km.double() if km is not None else None,
           "inp_signed": inp_s.sum(1) if inp else None, "inp_abs": inp_a.sum(1) if inp else None, "key0_pre": None,
           "entropy": None}
    if entropy:  # row entropy = lse_i - sum_j A_ij s_ij; the lse parts are added here
        w = _row_weights(N, window, dev)
        ps = ent.sum(1)
        res["entropy"] = torch.stack([lse.double().sum(1) - ps[:, 0], (lse * w).double().sum(1) - ps[:, 1]], dim=1)
    if amap:
        full = torch.zeros(H, map_size, map_size, **f64)
        full[:, :M, :M] = map_t
        res["map"] = full
    if q_pre is not None:
        qp, kp = q_pre.to(q.dtype).contiguous(), k_pre.to(q.dtype).contiguous()
        _, lse_pre = forward(qp, kp, None, scale, window, softcap, block)
        res["key0_pre"] = key0_weight(qp, kp, lse_pre, scale, window, softcap)
    return res
