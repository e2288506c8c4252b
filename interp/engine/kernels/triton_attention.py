"""The scan's GPU kernel: a Triton twin of the fused CPU kernel (``stream_attention.cpp``).

Same contract as ``interp.engine.kernels.stream_layer`` (exact attention of one layer, the output ``P @ V`` and
the tile reductions from the same probabilities), for CUDA tensors in float32, bfloat16 or float16, with float32
accumulation; under ``TRITON_INTERPRET=1`` the same kernels run on CPU tensors (the tests).

Design: two passes, the simple exact one.

1. Pass 1 (``forward``), the layer's output ``P @ V`` and each row's log-sum-exp ``lse_i = log sum_j exp(s_ij)`` of the
   scaled, soft-capped, masked logits: on a GPU from the fastest exact kernel for the layer's shape
   (``interp.engine.kernels.sdpa_lse``: cuDNN's or FlashAttention's fused attention through PyTorch, both of which
   return the log-sum-exp, or this module's ``_forward_kernel``). ``_forward_kernel`` is flash attention's forward, one
   program per (query block, head): online max and sum in log2 units (``exp2``, the scale times ``log2 e`` folded
   into the logits), the key tiles split into an unmasked interior and masked edge tiles (the diagonal, the window's
   lower edge), tile shape and launch settings autotuned per length bucket, output in the inputs' dtype; without v it
   gives ``lse`` only (the counterfactual passes).
2. ``_stats_kernel``, one program per (diagonal of tiles, head): the tiles (query block b, key block b - t) for every
   b, recomputed; ``A_ij = exp(s_ij - lse_i)`` is then the exact probability (not an online estimate). Every tile of
   a diagonal puts its entries on the same ``2T - 1`` lags, so the program adds the tiles in one register tile and
   shears it once at the end (``tl.gather``) into per-lag sums; column sums are per-key atomics, token-match sums,
   row entropy (``sum_j A_ij (lse_i - s_ij)``, no difference of large numbers) and per-plane InP order-free totals.
   Only the diagonals that hold the lags the measures read run (``diagonals``; the default scan reads lags 0..63
   and 500..5000, about a quarter of the tiles at 32k tokens), unless a reduction over every pair is asked for.
   Tiles below the diagonal and inside the window build no mask. Variants (``pass2_tile``): ``per-head``, one
   query head per program; ``packed`` / ``packed-small``, the G query heads that share a kv head in one program as
   ``G T`` rows of one tile (at most 256 / 128 rows), so each key tile is loaded once for all of them rather than G
   times. On a GPU the first layer of each shape times them and keeps the fastest of those that agree with the
   per-head kernel (``pass2_choices``).
   The key-0 column and the map of the first positions need no pass: ``exp(s - lse)`` on those few logits.

Why two passes and not one online pass: flash attention's single pass rescales its running ``P @ V`` when the
row maximum grows, which works for a linear accumulator but not for the tile reductions (a per-lag sum mixes rows
whose normalisers are not known yet; entropy needs the final normaliser). The second pass costs one more ``Q K^T``
and ``exp`` per tile it visits; storing unnormalised per-row sums and rescaling them at the end would need
``[head, pos, pos]``-sized buffers for the lag sums. ``Q K^T`` and ``P @ V`` run on tensor cores in the inputs'
dtype (float32 inputs in IEEE float32, so float32 scans are exact). Offsets into q, k, v and the output are int64
(``pos * head * d_head`` passes 2^31 at 512k tokens of an 8B model's shapes).

The exact pre-RoPE key-0 weight (``counterfactual_queries=0``) reuses pass 1 without v on the pre-RoPE vectors in
the inputs' dtype: ``A_pre[i, 0] = exp(s_pre[i, 0] - lse_pre_i)``; the default estimate from sampled rows is
``interp.engine.kernels.triton_rows`` (called by the collector).

Low-level module: imports torch, triton (``available()`` is False without it), ``interp.engine.kernels``' pairing helper
and ``sdpa_lse`` (PyTorch's fused kernels for pass 1).
"""

from __future__ import annotations

import functools
import math
import os

import numpy as np
import torch

from interp.engine.kernels import rotate_half_planes, sdpa_lse
from interp.engine.phases import phase

try:  # an optional extra: pip install -e '.[gpu]'
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - exercised where triton is absent
    triton = None

LAG_TILE = 64  # queries and keys per tile of pass 2 on a GPU (the lag shear needs square tiles)


def interpreted() -> bool:
    """Whether Triton runs its interpreter (``TRITON_INTERPRET=1``): kernels execute on CPU tensors with numpy."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split("+")[0].split(".")[:2] if p.isdigit())


def interpreter_problem() -> str | None:
    """Why Triton's interpreter cannot run here, or None. Triton before 3.7 converts one-element NumPy arrays to
    integers in its interpreter (every ``range`` over a scalar argument), which NumPy 2.4 refuses
    (triton-lang/triton#9171, fixed in Triton 3.7.0)."""
    if triton is None:
        return "Triton is not installed: pip install -e '.[gpu]'"
    if _version(triton.__version__) < (3, 7) and _version(np.__version__) >= (2, 4):
        return (f"Triton {triton.__version__}'s interpreter fails under NumPy {np.__version__} (triton-lang/triton#9171): "
                f"pip install 'triton>=3.7' to run the Triton engine on a CPU")
    return None


def available(device: torch.device | str | None = None) -> bool:
    """Whether the Triton kernels can run on ``device``: triton is installed and either the device is CUDA or
    ``TRITON_INTERPRET=1`` is set and the interpreter works with this NumPy (``interpreter_problem``; then CPU
    tensors run through the interpreter)."""
    if triton is None:
        return False
    dev = torch.device(device) if device is not None else None
    if interpreted():
        return (dev is None or dev.type == "cpu") and interpreter_problem() is None
    return (dev is None or dev.type == "cuda") and torch.cuda.is_available()


if triton is not None:

    # log2(e) = 1.4426950408889634 and ln(2) = 0.6931471805599453 are written as literals in the kernels (exp(x) =
    # exp2(x log2 e): exp2 is the GPU's native instruction); a global would have to be a constexpr, which the
    # interpreter does not mix with tensors

    @triton.jit
    def _tile_logits2(q, k, i, j, N, scale, softcap, window, HAS_CAP: tl.constexpr, HAS_WIN: tl.constexpr,
                      PREC: tl.constexpr, MASK: tl.constexpr):
        """Scaled, soft-capped logits of a [BM, BN] tile in log2 units (``s log2 e``), -inf where not visible.

        ``MASK=False``: the caller guarantees every pair is visible (causal, window, j < N), so no mask is built."""
        s = tl.dot(q, tl.trans(k), input_precision=PREC)
        if HAS_CAP:  # c * tanh(x / c), tanh through exp (exact at +-inf: 1 - 2 / (inf + 1) = 1)
            s = s * scale
            s = (softcap * 1.4426950408889634) * (1.0 - 2.0 / (tl.exp2((2.8853900817779268 / softcap) * s) + 1.0))
        else:
            s = s * (scale * 1.4426950408889634)
        if MASK:
            vis = (j[None, :] <= i[:, None]) & (j[None, :] < N)
            if HAS_WIN:
                vis = vis & ((i[:, None] - j[None, :]) < window)
            s = tl.where(vis, s, float("-inf"))
        return s

    @triton.jit
    def _forward_step(q, K, V, kvh, sk_n, sk_h, j0, i, d, m, acc, o, N, scale, softcap, window, D: tl.constexpr,
                      BN: tl.constexpr, HAS_CAP: tl.constexpr, HAS_WIN: tl.constexpr, PREC: tl.constexpr,
                      HAS_V: tl.constexpr, MASK: tl.constexpr):
        """One key tile of the online softmax (log2 units): the updated running max ``m``, sum ``acc`` and output ``o``."""
        j = j0 + tl.arange(0, BN)
        koff = j.to(tl.int64)[:, None] * sk_n + kvh * sk_h + d[None, :]
        kmask = (j[:, None] < N) & (d[None, :] < D)
        k = tl.load(K + koff, mask=kmask, other=0.0)
        s = _tile_logits2(q, k, i, j, N, scale, softcap, window, HAS_CAP, HAS_WIN, PREC, MASK)
        m_new = tl.maximum(m, tl.max(s, axis=1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # rows with nothing visible yet
        alpha = tl.exp2(m - m_safe)
        p = tl.exp2(s - m_safe[:, None])
        acc = acc * alpha + tl.sum(p, axis=1)
        if HAS_V:
            v = tl.load(V + koff, mask=kmask, other=0.0)
            o = o * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PREC)
        return m_new, acc, o

    @triton.jit
    def _forward_kernel(Q, K, V, OUT, LSE, sq_n, sq_h, sk_n, sk_h, so_n, so_h, N, NB, scale, softcap, window,
                        G: tl.constexpr, D: tl.constexpr, DP: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
                        HAS_CAP: tl.constexpr, HAS_WIN: tl.constexpr, PREC: tl.constexpr, HAS_V: tl.constexpr):
        """Pass 1, one block of BM queries of head h: ``LSE[h, i]`` (float32, natural log) and, with V,
        ``OUT = softmax(S) V`` (online, in OUT's dtype). The key tiles split in three runs: the window's lower edge
        (masked), the interior every row sees whole (no mask), the diagonal (masked). ``NB``: the autotuner's key."""
        pid, h = tl.program_id(0), tl.program_id(1)
        kvh = h // G
        i0 = pid * BM
        i = i0 + tl.arange(0, BM)
        d = tl.arange(0, DP)
        row_ok = i < N
        qoff = i.to(tl.int64)[:, None] * sq_n + h * sq_h + d[None, :]
        q = tl.load(Q + qoff, mask=row_ok[:, None] & (d[None, :] < D), other=0.0)
        m = tl.full([BM], float("-inf"), tl.float32)
        acc = tl.zeros([BM], tl.float32)
        o = tl.zeros([BM, DP], tl.float32)
        lo = 0
        mid = 0
        if HAS_WIN:  # first tile any row sees; first tile every row sees whole
            lo = (tl.maximum(i0 - window + 1, 0) // BN) * BN
            mid = tl.minimum(tl.maximum(((tl.maximum(i0 + BM - window, 0) + BN - 1) // BN) * BN, lo), i0)
        for j0 in range(lo, mid, BN):
            m, acc, o = _forward_step(q, K, V, kvh, sk_n, sk_h, j0, i, d, m, acc, o, N, scale, softcap, window, D, BN,
                                      HAS_CAP, HAS_WIN, PREC, HAS_V, True)
        for j0 in range(mid, i0, BN):
            m, acc, o = _forward_step(q, K, V, kvh, sk_n, sk_h, j0, i, d, m, acc, o, N, scale, softcap, window, D, BN,
                                      HAS_CAP, HAS_WIN, PREC, HAS_V, False)
        for j0 in range(i0, tl.minimum(i0 + BM, N), BN):
            m, acc, o = _forward_step(q, K, V, kvh, sk_n, sk_h, j0, i, d, m, acc, o, N, scale, softcap, window, D, BN,
                                      HAS_CAP, HAS_WIN, PREC, HAS_V, True)
        acc = tl.where(row_ok, acc, 1.0)  # padding rows: no log(0)
        tl.store(LSE + h * N + i, (m + tl.log2(acc)) * 0.6931471805599453, mask=row_ok)
        if HAS_V:
            ooff = i.to(tl.int64)[:, None] * so_n + h * so_h + d[None, :]
            tl.store(OUT + ooff, (o / acc[:, None]).to(OUT.dtype.element_ty), mask=row_ok[:, None] & (d[None, :] < D))

    @triton.jit
    def _stats_tile(Q, K, LSE, TOK, KMASS, b, t, u_r, u_h, row_head, hg, g_ok, c, d, f, psum, t_prev, t_dup, t_ind, e_raw,
                    e_norm, inp_s, inp_a, kvh, sq_n, sq_h, sk_n, sk_h, N, scale, softcap, window, skip,
                    D: tl.constexpr, F: tl.constexpr, GP: tl.constexpr, T: tl.constexpr, HAS_CAP: tl.constexpr,
                    HAS_WIN: tl.constexpr, PREC: tl.constexpr, MASK: tl.constexpr, DO_LAG: tl.constexpr,
                    DO_TM: tl.constexpr, DO_ENT: tl.constexpr, DO_KMASS: tl.constexpr, DO_INP: tl.constexpr):
        """One tile (query block b, key block b - t) of pass 2 for the GP packed heads: the accumulators updated.

        Rows are (packed head, query) pairs: ``u_h[u]`` the head, ``u_r[u]`` the row in the block. The key tile is
        loaded once for every packed head. ``MASK=False``: the caller knows every pair of the tile is visible."""
        i = b * T + u_r
        j = (b - t) * T + c
        row_ok = (i < N) & row_head
        q = tl.load(Q + i.to(tl.int64)[:, None] * sq_n + u_h[:, None] * sq_h + d[None, :], mask=row_ok[:, None] & (d[None, :] < D), other=0.0)
        k = tl.load(K + j.to(tl.int64)[:, None] * sk_n + kvh * sk_h + d[None, :], mask=(j[:, None] < N) & (d[None, :] < D), other=0.0)
        lse2 = tl.load(LSE + u_h * N + i, mask=row_ok, other=0.0) * 1.4426950408889634
        s2 = _tile_logits2(q, k, i, j, N, scale, softcap, window, HAS_CAP, HAS_WIN, PREC, MASK)
        vis = (s2 != float("-inf")) & row_ok[:, None]
        p = tl.where(vis, tl.exp2(s2 - lse2[:, None]), 0.0)
        if DO_LAG:
            psum += tl.where(j[None, :] >= skip, p, 0.0)
        if DO_TM:  # TransformerLens head_detector patterns (interp.attention.token_match_masks)
            tok_i = tl.load(TOK + i, mask=row_ok, other=-1)
            tok_j = tl.load(TOK + j, mask=j < N, other=-2)
            tok_jm1 = tl.load(TOK + j - 1, mask=(j >= 1) & (j < N), other=-3)
            t_prev += tl.sum(tl.where(j[None, :] == i[:, None] - 1, p, 0.0), axis=1)
            t_dup += tl.sum(tl.where((j[None, :] < i[:, None]) & (tok_j[None, :] == tok_i[:, None]), p, 0.0), axis=1)
            t_ind += tl.sum(tl.where((j[None, :] >= 1) & (tok_jm1[None, :] == tok_i[:, None]), p, 0.0), axis=1)
        if DO_ENT:  # -sum_j A log A = sum_j A (lse - s): no difference of two large numbers (exact at long N)
            ps_row = tl.sum(p * tl.where(vis, lse2[:, None] - s2, 0.0), axis=1)
            n_vis = i + 1
            if HAS_WIN:
                n_vis = tl.minimum(n_vis, window)
            w = tl.where(n_vis > 1, 1.0 / tl.log(tl.maximum(n_vis, 2).to(tl.float32)), 0.0)
            e_raw += ps_row
            e_norm += ps_row * w
        if DO_KMASS:  # per head and key: the packed rows of one head summed
            cols = tl.sum(tl.reshape(p, (GP, T, T)), axis=1)
            tl.atomic_add(KMASS + hg[:, None] * N + j[None, :], cols, mask=g_ok[:, None] & (j[None, :] < N), sem="relaxed")
        if DO_INP:  # per-plane q.k over visible pairs with keys >= skip (planes (l, l + D/2)); not attention-weighted
            pair = vis & (j[None, :] >= skip)
            for l in range(0, F):
                q1 = tl.load(Q + i.to(tl.int64) * sq_n + u_h * sq_h + l, mask=row_ok, other=0.0).to(tl.float32)
                q2 = tl.load(Q + i.to(tl.int64) * sq_n + u_h * sq_h + l + F, mask=row_ok, other=0.0).to(tl.float32)
                k1 = tl.load(K + j.to(tl.int64) * sk_n + kvh * sk_h + l, mask=j < N, other=0.0).to(tl.float32)
                k2 = tl.load(K + j.to(tl.int64) * sk_n + kvh * sk_h + l + F, mask=j < N, other=0.0).to(tl.float32)
                prod = tl.reshape(tl.where(pair, q1[:, None] * k1[None, :] + q2[:, None] * k2[None, :], 0.0), (GP, T, T))
                ps = tl.sum(tl.sum(prod, axis=2), axis=1).to(tl.float64)
                pa = tl.sum(tl.sum(tl.abs(prod), axis=2), axis=1).to(tl.float64)
                inp_s = tl.where(f[None, :] == l, inp_s + ps[:, None], inp_s)
                inp_a = tl.where(f[None, :] == l, inp_a + pa[:, None], inp_a)
        return psum, t_prev, t_dup, t_ind, e_raw, e_norm, inp_s, inp_a

    @triton.jit
    def _stats_kernel(Q, K, LSE, DIAGS, LAG, TOK, TM, ENT, KMASS, INPS, INPA,
                      sq_n, sq_h, sk_n, sk_h, N, scale, softcap, window, skip, n_qb, n_prog, NH,
                      G: tl.constexpr, D: tl.constexpr, DP: tl.constexpr, F: tl.constexpr, FP: tl.constexpr,
                      GP: tl.constexpr, T: tl.constexpr, HAS_CAP: tl.constexpr, HAS_WIN: tl.constexpr,
                      PREC: tl.constexpr, DO_LAG: tl.constexpr, DO_TM: tl.constexpr, DO_ENT: tl.constexpr,
                      DO_KMASS: tl.constexpr, DO_INP: tl.constexpr):
        """Pass 2, one tile diagonal ``t = DIAGS[program]`` of a group of ``NH`` query heads (``h0 = group * NH``; one
        head, or the ``G`` heads of one kv head packed as rows, ``GP`` = NH rounded up to a power of two): the tiles
        (query block b, key block b - t) for every b, so that every tile puts its lag-``delta`` entries on the same
        ``2T - 1`` lags ``t T + (r - c)``. The program sums the tiles' probabilities into one ``[GP T, T]`` register
        tile and shears it once at the end (``tl.gather``), so per-lag sums cost one add per tile entry; the other
        reductions are order-free totals or per-key sums. Only the diagonals in DIAGS run (those holding the lags the
        measures read, or all of them). Tiles strictly below the diagonal and inside the window build no mask."""
        pid, grp = tl.program_id(0), tl.program_id(1)
        t = tl.load(DIAGS + pid)
        h0 = grp * NH
        kvh = h0 // G
        u = tl.arange(0, GP * T)  # packed rows: head h0 + u // T, query row u % T of the block
        u_r = u % T
        u_h = h0 + u // T
        row_head = (u // T) < NH
        gi = tl.arange(0, GP)
        hg = h0 + gi
        g_ok = gi < NH
        c = tl.arange(0, T)
        d = tl.arange(0, DP)
        f = tl.arange(0, FP)
        psum = tl.zeros([GP * T, T], tl.float32)
        t_prev = tl.zeros([GP * T], tl.float32)
        t_dup = tl.zeros([GP * T], tl.float32)
        t_ind = tl.zeros([GP * T], tl.float32)
        e_raw = tl.zeros([GP * T], tl.float32)  # sum_j A_ij (lse_i - s_ij) in log2 units: the row entropy / ln 2
        e_norm = tl.zeros([GP * T], tl.float32)  # the same over log(#visible keys of row i)
        inp_s = tl.zeros([GP, FP], tl.float64)
        inp_a = tl.zeros([GP, FP], tl.float64)
        # every pair of a tile below the diagonal is causal-visible (j <= i - 1); inside the window when its largest
        # lag t T + T - 1 is; padded rows (i >= N) are cut by row_ok, and their keys j < i0 < N exist
        edge = t == 0
        if HAS_WIN:
            edge = edge | (t * T + T - 1 >= window)
        for b in range(t, n_qb):
            if edge:
                psum, t_prev, t_dup, t_ind, e_raw, e_norm, inp_s, inp_a = _stats_tile(
                    Q, K, LSE, TOK, KMASS, b, t, u_r, u_h, row_head, hg, g_ok, c, d, f, psum, t_prev, t_dup, t_ind,
                    e_raw, e_norm, inp_s, inp_a, kvh, sq_n, sq_h, sk_n, sk_h, N, scale, softcap, window, skip, D, F, GP,
                    T, HAS_CAP, HAS_WIN, PREC, True, DO_LAG, DO_TM, DO_ENT, DO_KMASS, DO_INP)
            else:
                psum, t_prev, t_dup, t_ind, e_raw, e_norm, inp_s, inp_a = _stats_tile(
                    Q, K, LSE, TOK, KMASS, b, t, u_r, u_h, row_head, hg, g_ok, c, d, f, psum, t_prev, t_dup, t_ind,
                    e_raw, e_norm, inp_s, inp_a, kvh, sq_n, sq_h, sk_n, sk_h, N, scale, softcap, window, skip, D, F, GP,
                    T, HAS_CAP, HAS_WIN, PREC, False, DO_LAG, DO_TM, DO_ENT, DO_KMASS, DO_INP)
        if DO_LAG:  # entry (r, c) has lag t T + r - c: two half-tiles of lags, each a row-wise gather then a column sum
            w = tl.arange(0, T)
            idx_lo = u_r[:, None] + (T - 1) - w[None, :]  # lag t T - (T - 1) + w  (r - c <= 0)
            idx_hi = u_r[:, None] - 1 - w[None, :]  # lag t T + 1 + w  (r - c >= 1)
            lo = tl.where(idx_lo < T, tl.gather(psum, tl.minimum(idx_lo, T - 1), axis=1), 0.0)
            hi = tl.where(idx_hi >= 0, tl.gather(psum, tl.maximum(idx_hi, 0), axis=1), 0.0)
            lo = tl.sum(tl.reshape(lo, (GP, T, T)), axis=1)  # [GP, T]: each packed head's rows summed
            hi = tl.sum(tl.reshape(hi, (GP, T, T)), axis=1)
            lag_lo = t * T - (T - 1) + w
            lag_hi = t * T + 1 + w
            tl.atomic_add(LAG + hg[:, None] * N + lag_lo[None, :], lo,
                          mask=g_ok[:, None] & (lag_lo[None, :] >= 0) & (lag_lo[None, :] < N), sem="relaxed")
            tl.atomic_add(LAG + hg[:, None] * N + lag_hi[None, :], hi,
                          mask=g_ok[:, None] & (lag_hi[None, :] >= 0) & (lag_hi[None, :] < N), sem="relaxed")
        part = hg * n_prog + pid  # per-program partial totals per head, added up on the host side in a fixed order
        if DO_TM:
            tl.store(TM + part * 3 + 0, tl.sum(tl.reshape(t_prev, (GP, T)), axis=1).to(tl.float64), mask=g_ok)
            tl.store(TM + part * 3 + 1, tl.sum(tl.reshape(t_dup, (GP, T)), axis=1).to(tl.float64), mask=g_ok)
            tl.store(TM + part * 3 + 2, tl.sum(tl.reshape(t_ind, (GP, T)), axis=1).to(tl.float64), mask=g_ok)
        if DO_ENT:
            tl.store(ENT + part * 2 + 0, tl.sum(tl.reshape(e_raw, (GP, T)), axis=1).to(tl.float64), mask=g_ok)
            tl.store(ENT + part * 2 + 1, tl.sum(tl.reshape(e_norm, (GP, T)), axis=1).to(tl.float64), mask=g_ok)
        if DO_INP:
            tl.store(INPS + part[:, None] * F + f[None, :], inp_s, mask=g_ok[:, None] & (f[None, :] < F))
            tl.store(INPA + part[:, None] * F + f[None, :], inp_a, mask=g_ok[:, None] & (f[None, :] < F))

    # Pass 1 on a GPU: the tile shape and launch settings picked by timing, once per (length bucket, head shape, mask
    # kind); Hopper's flash-attention settings among them. Configs that do not fit the chip are skipped by the tuner.
    _FORWARD_CONFIGS = [triton.Config(dict(BM=bm, BN=bn), num_warps=w, num_stages=st)
                        for bm, bn, w, st in ((128, 64, 8, 3), (128, 128, 8, 3), (128, 64, 4, 3), (64, 64, 4, 3),
                                              (64, 32, 4, 3))]

    def _prune(configs, named_args, **kwargs):
        """d_head above 128: only the 64-query tiles (a 128 x 256 query tile spills registers); else the larger ones."""
        big = named_args.get("DP", kwargs.get("DP", 128)) > 128
        keep = [c for c in configs if (c.kwargs["BM"] <= 64 and c.kwargs["BN"] <= 64) == big]
        return keep or configs

    _forward_tuned = triton.autotune(_FORWARD_CONFIGS, key=["NB", "D", "G", "HAS_CAP", "HAS_WIN", "HAS_V", "PREC"],
                                     prune_configs_by={"early_config_prune": _prune})(_forward_kernel)


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


def check_window(window: int | None) -> None:
    """Raise ValueError for a sliding window that hides every key (``window < 1``; None is full causal attention)."""
    if window is not None and window < 1:
        raise ValueError(f"a sliding window must see at least the query itself (window >= 1), got {window}; "
                         f"use None for full causal attention")


def triton_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor | None, scale: float, window: int | None = None,
                   softcap: float | None = None, block: int | tuple[int, int] | None = None) -> tuple[torch.Tensor | None, torch.Tensor]:
    """Pass 1 on the Triton kernel: ``(out [pos, head, d_head] in v's dtype or None without v, lse [head, pos] float32)``.

    ``lse_i`` is the natural-log log-sum-exp of row i's scaled, soft-capped, masked logits; ``out`` the layer's
    attention output (online softmax in log2 units, as flash attention). ``block``: a fixed tile, square or
    ``(queries, keys)`` (the interpreter, the tests; powers of two >= 16); None on a GPU autotunes the tile and launch
    settings (``_FORWARD_CONFIGS``). q, k, v may be strided views (only the last axis must be contiguous).

    Raises:
        ValueError: ``window < 1``.
    """
    check_window(window)
    N, H, D = q.shape
    a = _args(q, k, scale, window, softcap)
    lse = torch.empty(H, N, dtype=torch.float32, device=q.device)
    out = torch.empty(N, H, D, dtype=v.dtype, device=q.device) if v is not None else None
    so = (out.stride(0), out.stride(1)) if out is not None else (0, 0)
    args = (q, k, v if v is not None else k, out if out is not None else lse, lse, q.stride(0), q.stride(1), k.stride(0),
            k.stride(1), so[0], so[1], N, _pow2(N), a["scale"], a["softcap"], a["window"])
    kw = dict(G=a["G"], D=D, DP=a["DP"], HAS_CAP=a["HAS_CAP"], HAS_WIN=a["HAS_WIN"], PREC=a["PREC"], HAS_V=v is not None)
    if block is None:
        _forward_tuned[lambda meta: (triton.cdiv(N, meta["BM"]), H)](*args, **kw)
    else:
        bm, bn = (block, block) if isinstance(block, int) else block
        _forward_kernel[(triton.cdiv(N, bm), H)](*args, BM=bm, BN=bn, **kw)
    return out, lse


def forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor | None, scale: float, window: int | None = None,
            softcap: float | None = None, block: int | None = None) -> tuple[torch.Tensor | None, torch.Tensor]:
    """Pass 1: ``(out [pos, head, d_head] or None without v, lse [head, pos] float32)`` from the fastest exact kernel.

    On a GPU with ``block=None`` a layer that PyTorch's fused attention can run (16-bit inputs, no window, no
    soft-cap, output wanted) goes to the backend that ``interp.engine.kernels.sdpa_lse`` measured fastest for its shape
    (cuDNN, FlashAttention or this module's Triton kernel; each candidate's log-sum-exp is checked against a float32
    recomputation first); everything else runs ``triton_forward``.

    Raises:
        ValueError: ``window < 1``.
    """
    check_window(window)
    if block is None and q.is_cuda and v is not None:
        r = sdpa_lse.run(q, k, v, scale, window, softcap, lambda: triton_forward(q, k, v, scale, window, softcap))
        if r is not None:
            return r
    return triton_forward(q, k, v, scale, window, softcap, block)


def key0_weight(q: torch.Tensor, k: torch.Tensor, lse: torch.Tensor, scale: float, window: int | None,
                softcap: float | None, pos: torch.Tensor | None = None) -> torch.Tensor:
    """``[head, row]`` float32 ``A[i, 0] = exp(s_i0 - lse_i)`` (0 where key 0 is outside the window) of the query rows
    ``q`` ``[row, head, d_head]`` with their ``lse`` ``[head, row]``; ``pos``: the rows' positions (None: row i is
    position i)."""
    H = q.shape[1]
    k0 = k[0].float().repeat_interleave(H // k.shape[1], dim=0)  # [head, d]
    s0 = torch.einsum("nhd,hd->hn", q.float(), k0) * scale
    if softcap:
        s0 = softcap * torch.tanh(s0 / softcap)
    w = torch.exp(s0 - lse)
    if window is not None:
        if pos is None:
            w[:, window:] = 0.0
        else:
            w = torch.where(pos[None, :] < window, w, 0.0)
    return w


def map_weights(q: torch.Tensor, k: torch.Tensor, lse: torch.Tensor, scale: float, window: int | None,
                softcap: float | None, size: int) -> torch.Tensor:
    """``[head, size, size]`` float64 ``A[:M, :M]`` (``M = min(size, pos)``, zero-padded) from the rows' log-sum-exp:
    ``exp(s_ij - lse_i)`` on the visible pairs, computed in float32 (a few thousand logits)."""
    N, H, _ = q.shape
    M = min(size, N)
    qm = q[:M].float()
    km = k[:M].float().repeat_interleave(H // k.shape[1], dim=1)
    s = torch.einsum("ihd,jhd->hij", qm, km) * scale
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    pos = torch.arange(M, device=q.device)
    lag = pos[:, None] - pos[None, :]
    vis = (lag >= 0) & (lag < window) if window is not None else lag >= 0
    full = torch.zeros(H, size, size, dtype=torch.float64, device=q.device)
    full[:, :M, :M] = torch.where(vis, torch.exp(s - lse[:, :M, None]), 0.0).double()
    return full


def diagonals(N: int, T: int, window: int | None, lags: tuple[tuple[int, int], ...] | None) -> list[int]:
    """The tile diagonals ``t`` (tiles (b, b - t)) pass 2 must visit: those inside the window whose lags
    ``t T - (T - 1) .. t T + T - 1`` meet one of the inclusive ``lags`` ranges (every one when ``lags`` is None)."""
    n_qb = -(-N // T)
    n_diag = n_qb if window is None else min(n_qb, (window + T - 2) // T + 1)
    if lags is None:
        return list(range(n_diag))
    return [t for t in range(n_diag) if any(lo <= t * T + T - 1 and hi >= t * T - (T - 1) for lo, hi in lags)]


@functools.lru_cache(maxsize=64)
def _on_device(values: tuple[int, ...], device: torch.device) -> torch.Tensor:
    """``values`` as an int32 tensor on ``device``, made once: a host-to-device copy of pageable memory waits for the
    GPU's queue to drain, so one per layer would serialise the scan."""
    return torch.tensor(values, dtype=torch.int32, device=device)


PASS2 = ("per-head", "packed", "packed-small")
PASS2_ROWS = {"packed": 256, "packed-small": 128}  # most packed rows (query heads x queries of a tile) per program, GPU
PASS2_TOL = 1e-4  # relative: the variants differ only in float32 addition order
_PASS2_CHOICE: dict[tuple, str] = {}
_PASS2_TIMES: dict[tuple, dict[str, float]] = {}


def pass2_tile(name: str, G: int, block: int | None) -> tuple[int, int]:
    """``(GP, T)`` of a pass-2 variant: packed query heads per program (a power of two) and the square tile side.

    ``"per-head"``: one query head per program, ``T = block`` (``LAG_TILE`` on a GPU). ``"packed"`` and
    ``"packed-small"``: the ``G`` query heads of one kv head in one program (``GP`` = G rounded up to a power of two;
    the key tile is loaded once for all of them), ``T = block``, or on a GPU the largest power of two <= ``LAG_TILE``
    with ``GP T <= PASS2_ROWS[name]`` (256 rows: the key tile of Llama's four heads per kv head stays 64 wide;
    128 rows: fewer registers per program, for chips where the larger tile spills).

    Raises:
        ValueError: an unknown variant name.
    """
    if name not in PASS2:
        raise ValueError(f"unknown pass-2 variant {name!r}; use one of {', '.join(PASS2)}")
    if name == "per-head":
        return 1, block or LAG_TILE
    GP = _pow2(G)
    return GP, block or max(16, min(LAG_TILE, PASS2_ROWS[name] // GP))


def _pass2(name, q, k, lse, tok, a, window, block, skip, lags, flags):
    """Run pass 2 as variant ``name``: ``(lag [head, pos] f32, token_match [head, prog, 3], entropy [head, prog, 2],
    key_mass [head, pos] f32, inp_s, inp_a [head, prog, freq] f64)``, None for a reduction not asked for."""
    N, H, D = q.shape
    F, dev = D // 2, q.device
    GP, T = pass2_tile(name, a["G"], block)
    NH = 1 if name == "per-head" else a["G"]
    full = flags["tokens"] or flags["entropy"] or flags["key_mass"] or flags["inp"]
    diags = diagonals(N, T, window, None if full else lags) if (flags["lag"] or full) else []
    P = max(len(diags), 1)
    f32, f64 = dict(dtype=torch.float32, device=dev), dict(dtype=torch.float64, device=dev)
    lag_t = torch.zeros(H, N, **f32) if flags["lag"] else None
    tm = torch.zeros(H, P, 3, **f64) if flags["tokens"] else None
    ent = torch.zeros(H, P, 2, **f64) if flags["entropy"] else None
    km = torch.zeros(H, N, **f32) if flags["key_mass"] else None
    inp_s = torch.zeros(H, P, F, **f64) if flags["inp"] else None
    inp_a = torch.zeros(H, P, F, **f64) if flags["inp"] else None
    pick = lambda t: lse if t is None else t  # noqa: E731  a stand-in for buffers a specialisation never touches
    if diags:
        kw = dict(num_warps=4 if GP * T <= 128 else 8, num_stages=3) if block is None else {}
        _stats_kernel[(len(diags), H // NH)](
            q, k, lse, _on_device(tuple(diags), dev), pick(lag_t), pick(tok), pick(tm), pick(ent), pick(km), pick(inp_s),
            pick(inp_a), q.stride(0), q.stride(1), k.stride(0), k.stride(1), N, a["scale"], a["softcap"], a["window"],
            int(skip), triton.cdiv(N, T), len(diags), NH, G=a["G"], D=D, DP=a["DP"], F=max(F, 1), FP=max(16, _pow2(F)),
            GP=GP, T=T, HAS_CAP=a["HAS_CAP"], HAS_WIN=a["HAS_WIN"], PREC=a["PREC"], DO_LAG=flags["lag"],
            DO_TM=flags["tokens"], DO_ENT=flags["entropy"], DO_KMASS=flags["key_mass"], DO_INP=flags["inp"], **kw)
    return lag_t, tm, ent, km, inp_s, inp_a


def _agree(a: tuple, b: tuple, lags) -> bool:
    """Whether two pass-2 results agree to ``PASS2_TOL`` (relative to each reduction's largest value); lag sums are
    compared on the asked ``lags`` only (the variants' tiles visit different extra lags)."""
    for n, (x, y) in enumerate(zip(a, b)):
        if x is None:
            continue
        if x.dim() == 3:  # per-program partial totals: programs differ between variants, their sums must not
            x, y = x.sum(1), y.sum(1)
        if n == 0 and lags is not None:
            keep = torch.zeros(x.shape[-1], dtype=torch.bool, device=x.device)
            for lo, hi in lags:
                keep[lo : hi + 1] = True
            x, y = x[:, keep], y[:, keep]
        if y.numel() and not bool(((x.double() - y.double()).abs() <= PASS2_TOL * max(1.0, float(y.abs().max()))).all()):
            return False
    return True


def _pass2_choice(q, k, a, flags, lags, run) -> str:
    """The pass-2 variant for this layer's shape, measured once per process: the first layer of each shape (length
    rounded up to a power of two, heads, kv heads, d_head, dtype, window, soft-cap, reductions) runs every variant
    (``PASS2``; one of those with the same tile), drops a packed one that raises or disagrees with the per-head kernel
    (``_agree``), and keeps the fastest."""
    N, H, D = q.shape
    key = (_pow2(N), H, k.shape[1], D, q.dtype, a["HAS_WIN"], a["HAS_CAP"], tuple(sorted(flags.items())))
    if key not in _PASS2_CHOICE:
        times, ref, tiles = {}, None, set()
        for name in PASS2:
            tile = pass2_tile(name, a["G"], None)
            if tile in tiles:  # the same program as a variant already timed (e.g. G = 2)
                continue
            tiles.add(tile)
            try:
                run(name)  # warm-up: compilation
                ms, got = sdpa_lse.cuda_ms(lambda name=name: run(name))
            except Exception:  # noqa: BLE001  a variant the chip cannot compile (registers, shared memory): not a candidate
                continue
            if ref is None:
                ref = got
            elif not _agree(got, ref, lags):
                continue
            times[name] = ms
        _PASS2_TIMES[key] = times
        _PASS2_CHOICE[key] = min(times, key=times.get) if times else "per-head"
    return _PASS2_CHOICE[key]


def pass2_choices() -> dict[str, dict]:
    """What pass 2 picked per shape key (``"pos<=N h H kv KV d D dtype"``, then ``window`` / ``softcap`` where the layer
    has them and the reductions asked for, e.g. ``lag+tokens``) and the milliseconds each valid variant took (as
    ``sdpa_lse.choices``)."""
    def name(k: tuple) -> str:
        extra = [w for w, on in (("window", k[5]), ("softcap", k[6])) if on] + ["+".join(r for r, on in k[7] if on)]
        return " ".join([f"pos<={k[0]} h{k[1]} kv{k[2]} d{k[3]} {str(k[4]).removeprefix('torch.')}", *extra])

    return {name(k): {"picked": v, "ms": _PASS2_TIMES.get(k, {})} for k, v in _PASS2_CHOICE.items()}


def stream_layer(q, k, v, scale: float, window: int | None, softcap: float | None, block: int | None, skip: int, map_size: int,
                 q_pre=None, k_pre=None, inp_pairing: str | None = None, tokens=None, *, lag: bool = True, key0: bool = True,
                 amap: bool = True, entropy: bool = False, key_mass: bool = False,
                 lags: tuple[tuple[int, int], ...] | None = None, pass2: str = "auto"):
    """One layer's exact attention and reductions on the Triton kernels (GPU, or CPU under ``TRITON_INTERPRET=1``).

    Pass 1 (``forward``) gives the output and the row normalisers; pass 2 recomputes the tiles the reductions need
    and takes ``A = exp(s - lse)`` (exact) into them (module docstring). The key-0 column and the map of the first
    positions come from the normalisers directly (``key0_weight``, ``map_weights``: ``O(pos)`` and ``O(M^2)`` logits),
    so pass 2 runs only where a tile reduction needs it: the diagonals of the ``lags`` ranges, or every diagonal when
    token-match, entropy, column-sum or InP sums are asked for.

    Args:
        q: ``[pos, head, d_head]`` post-RoPE queries; k, v: ``[pos, kv_head, d_head]`` (float32, bfloat16 or float16,
            one device; ``v=None``: reductions only). scale, window, softcap, skip, map_size, q_pre, k_pre, tokens: as
            ``interp.engine.kernels.stream_layer``. block: queries and keys per tile (a power of two >= 16), or None for
            the GPU settings (autotuned pass 1, ``LAG_TILE`` for pass 2); the results do not depend on it beyond float
            rounding.
        inp_pairing: ``"rotate_half"`` or ``"interleaved"`` to also sum the per-plane InP, as the CPU kernel; None skips it.
        lag, key0, amap, entropy, key_mass: which reductions to compute (the others come back None).
        lags: inclusive ``(lo, hi)`` lag ranges whose sums are needed (None: every lag); the sums of other lags may be
            left at 0 (they are whenever pass 2 can skip their diagonals).
        pass2: the pass-2 kernel variant (``pass2_tile``): ``"per-head"``, ``"packed"`` / ``"packed-small"`` (the query
            heads of one kv head in one program, 256 / 128 rows on a GPU), or ``"auto"``: the variant the environment's
            ``INTERP_PASS2`` names if set, else on a GPU with ``block=None`` and grouped keys the fastest, measured on
            the first layer of each shape (``pass2_choices``), else per-head.

    Returns:
        dict with ``out [pos, head, d_head]`` in v's dtype (None without v), ``lse [head, pos]`` float32, ``lag [head, pos]``
        float64 (sum over queries of ``A[i, i - delta]``, keys >= skip), ``key0 [head, pos]`` float32 (``A[i, 0]``),
        ``map [head, M, M]`` float64 (``A[:M, :M]``), ``key0_pre [head, pos]`` float32 (with q_pre/k_pre), ``inp_signed``
        / ``inp_abs`` ``[head, freq]`` float64, ``token_match [head, 3]`` float64, ``entropy [head, 2]`` float64 (sums
        over queries of the row entropy in nats and of it over ``log(#visible keys)``), ``key_mass [head, pos]``
        float64 (column sums); a reduction not asked for is None.

    Determinism: the per-lag sums and column sums are added with float atomics across programs (a lag lies on two
    neighbouring diagonals), so on a GPU their last bits can change from run to run (float32 addition order; the
    tests bound the spread); every other output is run-to-run identical.

    Raises:
        ValueError: ``block`` not a power of two >= 16, tensors on different devices, an unknown pairing, ``window < 1``,
            an unknown ``pass2``.
    """
    if block is not None and (block < 16 or block & (block - 1)):
        raise ValueError(f"the Triton kernel needs a tile that is a power of two >= 16, got {block}")
    if len({t.device for t in (q, k) + ((v,) if v is not None else ())}) != 1:
        raise ValueError("q, k and v must be on one device")
    check_window(window)
    inp = inp_pairing is not None
    q, k = rotate_half_planes(q, k, inp_pairing)
    pass2 = pass2 if pass2 != "auto" else os.environ.get("INTERP_PASS2", "auto")
    if pass2 != "auto":
        pass2_tile(pass2, 1, block)  # an unknown variant (argument or INTERP_PASS2): the ValueError before any work
    a = _args(q, k, scale, window, softcap)
    dev = q.device
    rows = lambda t: t if t.stride(-1) == 1 else t.contiguous()  # noqa: E731  the kernels take row and head strides
    q, k = rows(q), rows(k)
    v = rows(v.to(q.dtype)) if v is not None else None
    with phase("attention", dev):
        out, lse = forward(q, k, v, scale, window, softcap, block)
    flags = dict(lag=lag, tokens=tokens is not None, entropy=entropy, key_mass=key_mass, inp=inp)
    tok = tokens.to(dev, torch.int64).contiguous() if tokens is not None else None
    run = lambda name: _pass2(name, q, k, lse, tok, a, window, block, skip, lags, flags)  # noqa: E731
    with phase("stats", dev):
        name = pass2
        if name == "auto":
            use_choice = block is None and q.is_cuda and a["G"] > 1 and any(flags.values())
            name = _pass2_choice(q, k, a, flags, lags, run) if use_choice else "per-head"
        lag_t, tm, ent, km, inp_s, inp_a = run(name)
        res = {"out": out, "lse": lse, "lag": lag_t.double() if lag else None,
               "key0": key0_weight(q, k, lse, scale, window, softcap) if key0 else None,
               "map": map_weights(q, k, lse, scale, window, softcap, map_size) if amap else None,
               "token_match": tm.sum(1) if tm is not None else None, "key_mass": km.double() if km is not None else None,
               "inp_signed": inp_s.sum(1) if inp else None, "inp_abs": inp_a.sum(1) if inp else None, "key0_pre": None,
               "entropy": None}
        if entropy:  # the kernel summed A (lse - s) in log2 units
            res["entropy"] = ent.sum(1) * math.log(2.0)
    if q_pre is not None:
        with phase("counterfactual", dev):
            qp, kp = q_pre.to(q.dtype).contiguous(), k_pre.to(q.dtype).contiguous()
            _, lse_pre = triton_forward(qp, kp, None, scale, window, softcap, block)
            res["key0_pre"] = key0_weight(qp, kp, lse_pre, scale, window, softcap)
    return res
