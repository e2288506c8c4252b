"""Attention of sampled query rows to key 0 on Triton: the pre-RoPE counterfactual's default estimate on a GPU.

The scan estimates the mean pre-RoPE sink weight ``mean_i A_pre[i, 0]`` from ``counterfactual_queries`` stratified
query rows (``interp.attention.stratified_rows``; exact for shorter prompts). ``interp.attention.key_weight_rows``
computes each row exactly with PyTorch ops, a chunk of rows at a time against every key up to the chunk's last row:
``[head, rows, pos]`` logits written, masked, exponentiated and summed in memory, several passes over about a
gigabyte per layer at 32k tokens of an 8B model. Here one Triton program per (block of ``ROWS_BLOCK`` sorted rows,
query head) streams the keys once with flash attention's online log-sum-exp (``triton_attention._forward_step``,
no values) and keeps only ``lse_i``; the weight is then ``A[i, 0] = exp(s_i0 - lse_i)`` from one logit per row
(0 where key 0 is outside row i's window). Same contract and arithmetic as ``key_weight_rows``: float32 inputs in
IEEE float32 (``"triton"``) or in three TF32 products (``"triton-tf32x3"``, tensor cores, about float32's accuracy).

``key_weight_rows`` picks per shape on a GPU, as pass 2 does (``triton_attention.pass2_choices``): the first layer of
each shape runs PyTorch's path and each Triton variant, drops a variant that raises or differs from PyTorch's by more
than ``ROWS_TOL``, and keeps the fastest (``rows_choices``; ``INTERP_ROWS`` forces one). Under the interpreter
(``TRITON_INTERPRET=1``, CPU tensors: the tests) it runs ``"triton"``.

Low-level module: imports torch, ``interp.attention`` and the Triton kernels' module.
"""

from __future__ import annotations

import os

import torch

from interp.attention import check_qk
from interp.attention import key_weight_rows as torch_key_weight_rows
from interp.engine.kernels import sdpa_lse
from interp.engine.kernels import triton_attention as ta

ROWS_BLOCK = 16  # sorted query rows per program (stratified rows: neighbours in position, so one key range serves them)
KEY_BLOCK = 64  # keys per tile on a GPU
VARIANTS = ("torch", "triton", "triton-tf32x3")
ROWS_TOL = 1e-4  # absolute, on weights in [0, 1]: the variants differ in float32 rounding only
_CHOICE: dict[tuple, str] = {}
_TIMES: dict[tuple, dict[str, float]] = {}

if ta.triton is not None:
    from interp.engine.kernels.triton_attention import _forward_step

    triton, tl = ta.triton, ta.tl

    @triton.jit
    def _rows_lse_kernel(Q, POS, K, LSE, sq_r, sq_h, sk_n, sk_h, R, N, scale, softcap, window,
                         G: tl.constexpr, D: tl.constexpr, DP: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
                         HAS_CAP: tl.constexpr, HAS_WIN: tl.constexpr, PREC: tl.constexpr):
        """``LSE[h, r]`` (float32, natural log) of query row ``r`` (at position ``POS[r]``, sorted) of head h over its
        visible keys: one block of BM rows, the key tiles from the first one any of them sees to the last row."""
        pid, h = tl.program_id(0), tl.program_id(1)
        kvh = h // G
        r = pid * BM + tl.arange(0, BM)
        r_ok = r < R
        i = tl.load(POS + r, mask=r_ok, other=-1)  # padding rows at -1 see no key
        d = tl.arange(0, DP)
        qoff = r.to(tl.int64)[:, None] * sq_r + h * sq_h + d[None, :]
        q = tl.load(Q + qoff, mask=r_ok[:, None] & (d[None, :] < D), other=0.0)
        m = tl.full([BM], float("-inf"), tl.float32)
        acc = tl.zeros([BM], tl.float32)
        o = tl.zeros([BM, DP], tl.float32)  # no values: _forward_step leaves it
        hi = tl.max(i, axis=0) + 1
        lo = 0
        if HAS_WIN:
            first = tl.min(tl.where(r_ok, i, N), axis=0)
            lo = (tl.maximum(first - window + 1, 0) // BN) * BN
        for j0 in range(lo, hi, BN):
            m, acc, o = _forward_step(q, K, K, kvh, sk_n, sk_h, j0, i, d, m, acc, o, N, scale, softcap, window, D, BN,
                                      HAS_CAP, HAS_WIN, PREC, False, True)
        acc = tl.where(r_ok, acc, 1.0)  # padding rows: no log(0)
        tl.store(LSE + h * R + r, (m + tl.log2(acc)) * 0.6931471805599453, mask=r_ok)


def rows_lse(q_rows: torch.Tensor, pos: torch.Tensor, k: torch.Tensor, scale: float, window: int | None = None,
             softcap: float | None = None, precision: str | None = None, block: int | None = None) -> torch.Tensor:
    """``[head, row]`` float32 natural-log log-sum-exp of each query row over its visible keys (causal, window,
    soft-cap as the model).

    Args:
        q_rows: ``[row, head, d_head]`` the queries of the rows; pos: ``[row]`` their positions, sorted ascending
            (int); k: ``[pos, kv_head, d_head]`` every key (same dtype and device as q_rows).
        precision: ``tl.dot``'s input precision (None: IEEE for float32, the tensor cores' own for 16-bit).
        block: keys per tile (a power of two >= 16; None: ``KEY_BLOCK``).

    Raises:
        ValueError: ``window < 1``.
    """
    ta.check_window(window)
    R, H, D = q_rows.shape
    n_kv = k.shape[1]
    lse = torch.empty(H, R, dtype=torch.float32, device=q_rows.device)
    if R == 0:
        return lse
    q_rows, k = q_rows.contiguous(), k if k.stride(-1) == 1 else k.contiguous()
    pos32 = pos.to(device=q_rows.device, dtype=torch.int32).contiguous()
    _rows_lse_kernel[(triton.cdiv(R, ROWS_BLOCK), H)](
        q_rows, pos32, k, lse, q_rows.stride(0), q_rows.stride(1), k.stride(0), k.stride(1), R, k.shape[0], float(scale),
        float(softcap or 1.0), int(window or 0), G=H // n_kv, D=D, DP=max(16, ta._pow2(D)), BM=ROWS_BLOCK,
        BN=block or KEY_BLOCK, HAS_CAP=bool(softcap), HAS_WIN=window is not None,
        PREC=precision or ta._precision(q_rows.dtype))
    return lse


def triton_key_weight_rows(q: torch.Tensor, k: torch.Tensor, rows: torch.Tensor, scale: float, window: int | None = None,
                           softcap: float | None = None, rows_host: torch.Tensor | None = None, precision: str | None = None,
                           block: int | None = None) -> torch.Tensor:
    """``[head, row]`` float32 ``A[h, rows[r], 0]`` from ``rows_lse`` (module docstring); the arguments and the result
    as ``interp.attention.key_weight_rows`` with ``key=0``, rows in any order.

    Raises:
        ShapeError: q, k not ``[pos, head|kv_head, d_head]``.
    """
    check_qk(q, k)
    host = rows_host if rows_host is not None else rows.cpu()
    order = None if bool((host[1:] >= host[:-1]).all()) else torch.argsort(host)
    pos = rows.to(q.device) if order is None else rows.to(q.device)[order.to(q.device)]
    q_rows = q.index_select(0, pos)
    lse = rows_lse(q_rows, pos, k, scale, window, softcap, precision, block)
    w = ta.key0_weight(q_rows, k, lse, scale, window, softcap, pos=pos)
    return w if order is None else w[:, torch.argsort(order).to(q.device)]


def _run(name: str, q, k, rows, scale, window, softcap, rows_host) -> torch.Tensor:
    if name == "torch":
        return torch_key_weight_rows(q, k, rows, scale, window, softcap, rows_host=rows_host)
    return triton_key_weight_rows(q, k, rows, scale, window, softcap, rows_host,
                                  precision="tf32x3" if name == "triton-tf32x3" else None)


def _choice(q, k, rows, scale, window, softcap, rows_host) -> str:
    """The fastest variant that agrees with PyTorch's for this shape, measured on its first call (module docstring)."""
    key = (ta._pow2(q.shape[0]), q.shape[1], k.shape[1], q.shape[2], q.dtype, rows.numel(), window is not None, bool(softcap))
    if key not in _CHOICE:
        times, ref = {}, None
        for name in VARIANTS:
            if name == "triton-tf32x3" and q.dtype != torch.float32:
                continue
            run = lambda name=name: _run(name, q, k, rows, scale, window, softcap, rows_host)  # noqa: E731
            try:
                run()  # warm-up: compilation
                ms, got = sdpa_lse.cuda_ms(run)
            except Exception:  # noqa: BLE001  a variant this chip or Triton build cannot compile: not a candidate
                continue
            if ref is None:
                ref = got
            elif not bool(((got - ref).abs() <= ROWS_TOL).all()):
                continue
            times[name] = ms
        _TIMES[key] = times
        _CHOICE[key] = min(times, key=times.get) if times else "torch"
    return _CHOICE[key]


def key_weight_rows(q: torch.Tensor, k: torch.Tensor, rows: torch.Tensor, scale: float, window: int | None = None,
                    softcap: float | None = None, rows_host: torch.Tensor | None = None) -> torch.Tensor:
    """``[head, row]`` float32 ``A[h, rows[r], 0]`` on the variant for this device and shape (module docstring):
    ``INTERP_ROWS`` if set, else on a GPU the fastest that agrees with PyTorch's, under the interpreter ``"triton"``.

    Raises:
        ShapeError: q, k not ``[pos, head|kv_head, d_head]``.
        ValueError: ``INTERP_ROWS`` names no variant.
    """
    name = os.environ.get("INTERP_ROWS")
    if name is not None and name not in VARIANTS:
        raise ValueError(f"INTERP_ROWS={name!r} names no variant; use one of {', '.join(VARIANTS)}")
    if name is None:
        name = _choice(q, k, rows, scale, window, softcap, rows_host) if q.is_cuda else "triton"
    return _run(name, q, k, rows, scale, window, softcap, rows_host)


def rows_choices() -> dict[str, dict]:
    """What ``key_weight_rows`` picked per shape (``"pos<=N h H kv KV d D dtype rows R"``, then ``window`` / ``softcap``)
    and each valid variant's milliseconds (as ``triton_attention.pass2_choices``)."""
    def name(k: tuple) -> str:
        extra = [w for w, on in (("window", k[6]), ("softcap", k[7])) if on]
        return " ".join([f"pos<={k[0]} h{k[1]} kv{k[2]} d{k[3]} {str(k[4]).removeprefix('torch.')} rows {k[5]}", *extra])

    return {name(k): {"picked": v, "ms": _TIMES.get(k, {})} for k, v in _CHOICE.items()}
