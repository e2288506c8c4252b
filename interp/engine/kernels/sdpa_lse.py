"""Pass 1 of the GPU scan from PyTorch's fused attention kernels: the layer output and every row's log-sum-exp.

The scan's tile statistics need each query row's log-sum-exp (LSE) of its scaled, masked logits. PyTorch's cuDNN and
FlashAttention kernels compute it anyway and return it through their private ATen entry points
(``aten._scaled_dot_product_cudnn_attention(..., compute_log_sumexp=True)``,
``aten._scaled_dot_product_flash_attention``: ``[batch, head, pos]`` float32, natural log), the public
``scaled_dot_product_attention`` does not. They run where a layer is plain causal attention (no sliding window, no
soft-cap) in bfloat16 or float16 on CUDA; the kv heads are repeated for the query heads that share them where the
backend refuses grouped keys.

Which kernel runs a layer is measured, not assumed: the first layer of each shape (length rounded up to a power of
two, heads, kv heads, d_head, dtype) runs every candidate (cuDNN, FlashAttention, the Triton forward), checks each
one's LSE against a float32 recomputation on 16 rows (a candidate off by more than 0.05 nats, or that raises, is
dropped: private entry points change between PyTorch versions) and keeps the fastest for the rest of the process.
``INTERP_PASS1=triton|cudnn|flash`` forces one (an unusable forced backend falls back to Triton); ``choices()`` tells
what was picked and the times measured.

Low-level module: imports only torch.
"""

from __future__ import annotations

import os
from typing import Callable

import torch

_CHOICE: dict[tuple, str] = {}
_TIMES: dict[tuple, dict[str, float]] = {}
LSE_TOL = 0.05  # nats: bf16 inputs round the logits by ~1e-2; a wrong convention (log2, padded rows) is off by far more


def _bhnd(x: torch.Tensor, heads: int) -> torch.Tensor:
    """``[pos, h, d]`` -> ``[1, heads, pos, d]`` (kv heads repeated when ``heads`` > h)."""
    x = x.transpose(0, 1)[None]
    return x.repeat_interleave(heads // x.shape[1], dim=1) if x.shape[1] != heads else x


def _cudnn(q, k, v, scale):
    H = q.shape[1]
    try:  # grouped keys first (cuDNN supports them in recent versions), else repeated
        r = torch.ops.aten._scaled_dot_product_cudnn_attention(_bhnd(q, H), _bhnd(k, k.shape[1]), _bhnd(v, v.shape[1]), None,
                                                               True, 0.0, True, False, scale=scale)
    except RuntimeError:
        r = torch.ops.aten._scaled_dot_product_cudnn_attention(_bhnd(q, H), _bhnd(k, H), _bhnd(v, H), None, True, 0.0, True,
                                                               False, scale=scale)
    return r[0], r[1]


def _flash(q, k, v, scale):
    H = q.shape[1]
    r = torch.ops.aten._scaled_dot_product_flash_attention(_bhnd(q, H), _bhnd(k, H), _bhnd(v, H), 0.0, True, False, scale=scale)
    return r[0], r[1]


BACKENDS: dict[str, Callable] = {"cudnn": _cudnn, "flash": _flash}


def _unpack(out: torch.Tensor, lse: torch.Tensor, N: int, H: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``out [1, head, pos, d]``, ``lse [1, head, pos(, 1)]`` -> ``([pos, head, d] view, [head, pos] float32)``."""
    return out[0].transpose(0, 1), lse.reshape(H, -1)[:, :N].float()


def reference_lse(q: torch.Tensor, k: torch.Tensor, scale: float, rows: torch.Tensor) -> torch.Tensor:
    """``[head, row]`` float32 LSE of causal attention for the query positions ``rows`` (float32 recomputation)."""
    H, KV = q.shape[1], k.shape[1]
    kk = k.float().repeat_interleave(H // KV, dim=1)  # [pos, head, d]
    s = torch.einsum("rhd,jhd->hrj", q[rows].float(), kk) * scale
    s = s.masked_fill(torch.arange(k.shape[0], device=q.device)[None, None, :] > rows[None, :, None], float("-inf"))
    return torch.logsumexp(s, dim=-1)


def cuda_ms(fn) -> tuple[float, object]:
    """``(milliseconds, fn())`` of one call of ``fn`` on the current CUDA stream (CUDA events, synchronised)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    r = fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end), r


def _choose(key, q, k, v, scale, triton_fn) -> str:
    N, H = q.shape[0], q.shape[1]
    rows = torch.unique(torch.linspace(0, N - 1, 16, device=q.device).long())
    ref = reference_lse(q, k, scale, rows)
    cands = {"triton": triton_fn, **{n: (lambda f=f: _unpack(*f(q, k, v, scale), N, H)) for n, f in BACKENDS.items()}}
    forced = os.environ.get("INTERP_PASS1")
    if forced:
        cands = {n: f for n, f in cands.items() if n in (forced, "triton")}
    times = {}
    for name, fn in cands.items():
        try:
            fn()  # warm-up (compilation, autotuning)
            ms, (_, lse) = cuda_ms(fn)
        except Exception:  # noqa: BLE001  a private entry point that refuses this shape, dtype or version: not a candidate
            continue
        if (lse[:, rows] - ref).abs().max() <= LSE_TOL:
            times[name] = ms
    _TIMES[key] = times
    if forced in times:
        return forced
    return min(times, key=times.get) if times else "triton"


def run(q, k, v, scale: float, window: int | None, softcap: float | None, triton_fn: Callable):
    """``(out [pos, head, d_head], lse [head, pos] float32)`` from the chosen backend, or None where only the Triton
    forward applies (a window, a soft-cap, float32 inputs, a CPU tensor); ``triton_fn()`` runs the Triton forward."""
    if window is not None or softcap or not q.is_cuda or q.dtype not in (torch.bfloat16, torch.float16):
        return None
    N, H, D = q.shape
    key = (1 << max(0, (N - 1).bit_length()), H, k.shape[1], D, q.dtype)
    if key not in _CHOICE:
        _CHOICE[key] = _choose(key, q, k, v, scale, triton_fn)
    name = _CHOICE[key]
    if name == "triton":
        return triton_fn()
    return _unpack(*BACKENDS[name](q, k, v, scale), N, H)


def choices() -> dict[str, dict]:
    """What pass 1 picked per shape key (``"pos<=N h H kv KV d D dtype"``) and the milliseconds each valid candidate took."""
    return {f"pos<={k[0]} h{k[1]} kv{k[2]} d{k[3]} {str(k[4]).removeprefix('torch.')}": {"picked": v, "ms": _TIMES.get(k, {})}
            for k, v in _CHOICE.items()}
