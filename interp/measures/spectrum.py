"""Spectra of queries and keys from Gram matrices: r_l, R_tau, stable rank, FSV ratio, Lemma 1.

- r_l and R_tau (paper 004, eq. 7): for X (tokens x d) with singular values s, ``r_l = s_l^2 / sum s^2``;
  ``R_tau`` = smallest l with ``sum_{m<=l} r_m >= tau`` (tau = 0.95). Not mean-centred.
- Stable rank (paper 001): ``||X||_F^2 / ||X||_2^2 = 1 / r_1``.
- FSV ratio (paper 001): ``||R(X)||_2 / ||X||_2``, post-RoPE over pre-RoPE spectral norm.
- Lemma 1 (paper 001) predicts the FSV ratio ``(1/sqrt 2) * max_k alpha_k`` for long inputs, alpha_k the
  norm of the top right singular vector of X restricted to rotation plane k (model pairing).

All from ``X^T X`` summed over tokens and prompts: ``s^2`` are its eigenvalues.

Precision: float32 products summed in float64 across prompts. A 16-bit model scanned on a GPU has its Gram matrices
made on tensor cores (``gram(..., fast=True)``): the post-RoPE q / k in the model's own dtype (16-bit products are
exact in float32; float32 accumulation, as the float32 path), the pre-RoPE ones (recovered in float32) in TF32. Against
float64, on the zoo models' bf16 q / k (``figures/gram_precision.csv``, ``analyses/benchmarks/gram_precision.py``;
quoted in the engineering results): the post-RoPE metrics keep the float32 path's error, the pre-RoPE ones gain TF32's
rounding, far below the bf16 model's own difference from float32 (``figures/dtype_error.csv``). A float32 model keeps
IEEE float32 everywhere.
"""

from __future__ import annotations

import contextlib
import math

import torch
from jaxtyping import Float

from interp.measures.base import Column, Entry, Measure, Option, kv_index
from interp.rope import plane_channels


@contextlib.contextmanager
def tf32_matmul():
    """cuBLAS float32 GEMMs on TF32 tensor cores inside the block (the process-wide setting restored after; torch
    2.9's ``fp32_precision``, or ``allow_tf32`` before it)."""
    m = torch.backends.cuda.matmul
    name, value = ("fp32_precision", "tf32") if hasattr(m, "fp32_precision") else ("allow_tf32", True)
    before = getattr(m, name)
    setattr(m, name, value)
    try:
        yield
    finally:
        setattr(m, name, before)


_NO_OUT_DTYPE: list[bool] = []  # set once a torch without bmm(..., out_dtype=) refused it


def _bmm_f32(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a @ b`` of 16-bit CUDA tensors with float32 accumulation and output (``bmm(..., out_dtype=)``, torch >= 2.8),
    or the float32 product of their upcasts on an older torch (the same products, on CUDA cores)."""
    if not _NO_OUT_DTYPE:
        try:
            return torch.bmm(a, b, out_dtype=torch.float32)
        except torch.cuda.OutOfMemoryError:
            raise
        except (TypeError, RuntimeError, NotImplementedError):  # this torch has no such overload
            _NO_OUT_DTYPE.append(True)
    return torch.bmm(a.float(), b.float())


def gram(x: Float[torch.Tensor, "pos head d_head"], fast: bool = False) -> Float[torch.Tensor, "head d_head d_head"]:
    """``X^T X`` per head (float32 products, returned as float64 for accumulation).

    ``fast`` (CUDA tensors only; else ignored): tensor cores, 16-bit ``x`` in its dtype with float32 accumulation,
    float32 ``x`` in TF32 (module docstring: the error table)."""
    if fast and x.is_cuda:
        xt = x.transpose(0, 1)
        if x.dtype in (torch.bfloat16, torch.float16):
            return _bmm_f32(xt.mT, xt).double()
        with tf32_matmul():
            xt = xt.float()
            return torch.matmul(xt.mT, xt).double()
    x = x.float().transpose(0, 1)
    return torch.matmul(x.transpose(1, 2), x).double()


def spectrum_metrics(G: Float[torch.Tensor, "... d d"], tau: float = 0.95) -> dict[str, torch.Tensor]:
    """r1, R_tau (1-based count), stable rank and spectral norm from Gram matrices."""
    ev = torch.linalg.eigvalsh(G).flip(-1).clamp(min=0)  # descending s^2
    total = ev.sum(-1)
    r = ev / total[..., None]
    cum = r.cumsum(-1)
    R = (cum < tau - 1e-12).sum(-1) + 1
    return {"r1": r[..., 0], "R": R.double(), "srank": 1.0 / r[..., 0], "spec_norm": ev[..., 0].sqrt()}


def lemma1_alpha(G: Float[torch.Tensor, "... d d"], pairing: str = "rotate_half") -> Float[torch.Tensor, "... freq"]:
    """alpha_k: norm of the top right singular vector restricted to each rotation plane (paper 001, Lemma 1)."""
    _, vecs = torch.linalg.eigh(G)
    v = vecs[..., :, -1]
    ch = plane_channels(G.shape[-1], pairing)
    return torch.sqrt(v[..., ch[:, 0]] ** 2 + v[..., ch[:, 1]] ** 2)


def fsv_prediction(G: Float[torch.Tensor, "... d d"], pairing: str = "rotate_half") -> torch.Tensor:
    """Lemma 1's FSV ratio ``max_k alpha_k / sqrt 2`` (long-input limit)."""
    return lemma1_alpha(G, pairing).max(-1).values / math.sqrt(2)


def srank_prediction(G: Float[torch.Tensor, "... d d"], pairing: str = "rotate_half") -> torch.Tensor:
    """Theorem 1's stable-rank ratio ``srank(R(X)) / srank(X) -> 2 / max_k alpha_k^2`` (paper 001, Theorem 1, App. A.1).

    ``alpha_k`` as in ``lemma1_alpha`` (norm of the top right singular vector of X in rotation plane k,
    model pairing), from the pre-RoPE Gram matrix ``G = X^T X``. The theorem assumes ``X = u v^T`` (rank 1)
    with slowly varying ``u`` and n -> inf; the value lies in ``[2, d]`` (2: all energy in one plane;
    d: spread evenly over all planes). Equals ``1 / fsv_prediction(G) ** 2``.

    Args:
        G: ``[..., d, d]`` pre-RoPE Gram matrices (e.g. ``ScanResult.state["gram_k_pre"]``).
        pairing: ``"rotate_half"`` (HF models) or ``"interleaved"``.

    Returns:
        ``[...]`` float64 predicted ratio (dimensionless).

    Raises:
        ValueError: unknown pairing or odd ``d`` (from ``plane_channels``).
    """
    return 2.0 / lemma1_alpha(G, pairing).max(-1).values ** 2


# --------------------------------------------------------------------------------------------
# The measure
# --------------------------------------------------------------------------------------------


class Spectrum(Measure):
    """Gram matrices of pre- and post-RoPE queries and keys -> r1, R_tau, stable rank, FSV ratio, Lemma 1 (module docstring)."""

    name = "spectrum"
    summary = "r1, R95, stable rank and FSV ratio of pre/post-RoPE Q and K from Gram matrices (004 eq. 7; 001 Lemma 1)"
    options = (Option("tau", 0.95, "cumulative energy for R_tau (004 eq. 7: 0.95)"),)

    def columns(self, cfg):
        out = []
        for x, X in (("q", "Q"), ("k", "K")):
            out += [Column(f"r1_{x}", f"top singular value's share of pre-RoPE {X}: r1 = s_1^2 / sum s^2, not centred (004 eq. 7)", compare=True),
                    Column(f"R95_{x}", f"singular values holding pre-RoPE {X}'s energy (share tau, 0.95 by default): fewest with cumulative r >= tau (R_tau, 004 eq. 7)"),
                    Column(f"srank_{x}_pre", f"stable rank ||X||_F^2 / ||X||_2^2 of pre-RoPE {X} (001)"),
                    Column(f"srank_{x}_rot", f"stable rank of post-RoPE {X} (001)"),
                    Column(f"fsv_ratio_{x}", f"how RoPE changes {X}'s spectral norm: post over pre-RoPE, ||R(X)||_2 / ||X||_2 (FSV ratio, 001)"),
                    Column(f"fsv_lemma1_{x}", f"long-input limit of {X}'s FSV ratio: max_k alpha_k / sqrt 2 (001 Lemma 1)")]
        return out

    def entries(self, dims, cfg):
        L, H, K, D = dims.n_layers, dims.n_heads, dims.n_kv_heads, dims.d_head
        return [Entry("gram_q_pre", (L, H, D, D)), Entry("gram_q_rot", (L, H, D, D)),
                Entry("gram_k_pre", (L, K, D, D)), Entry("gram_k_rot", (L, K, D, D))]

    def update(self, x):
        # a 16-bit model on a GPU: tensor cores, its own q / k after RoPE (module docstring)
        fast = x.native is not None and x.native[0].is_cuda and x.native[0].dtype in (torch.bfloat16, torch.float16)
        q_rot, k_rot = (x.native[0], x.native[1]) if fast else (x.q_rot, x.k_rot)
        return {"gram_q_pre": gram(x.q_pre, fast), "gram_q_rot": gram(q_rot, fast), "gram_k_pre": gram(x.k_pre, fast),
                "gram_k_rot": gram(k_rot, fast)}

    def compute(self, s):
        st, cfg, kv = s.state, s.config, kv_index(s.card)
        cols = {}
        for name, expand in (("q", False), ("k", True)):
            pre = spectrum_metrics(st[f"gram_{name}_pre"], cfg.tau)
            rot = spectrum_metrics(st[f"gram_{name}_rot"], cfg.tau)
            pred = fsv_prediction(st[f"gram_{name}_pre"], s.card.pairing)
            e = (lambda t: t[:, kv]) if expand else (lambda t: t)  # kv-head values shown on every query head of the group
            cols[f"r1_{name}"] = e(pre["r1"])
            cols[f"R95_{name}"] = e(pre["R"])
            cols[f"srank_{name}_pre"] = e(pre["srank"])
            cols[f"srank_{name}_rot"] = e(rot["srank"])
            cols[f"fsv_ratio_{name}"] = e(rot["spec_norm"] / pre["spec_norm"])
            cols[f"fsv_lemma1_{name}"] = e(pred)
        return cols


def gram_matrices(s, kind: str) -> tuple[Float[torch.Tensor, "layer head d_head d_head"], Float[torch.Tensor, "layer head d_head d_head"]]:
    """``(G_pre, G_rot)``: summed ``X^T X`` of pre- and post-RoPE queries (``kind="q"``, ``[layer, head, d, d]``) or keys
    (``kind="k"``, ``[layer, kv_head, d, d]``) of a summed scan.

    Raises:
        ValueError: ``kind`` is not ``"q"`` or ``"k"``.
    """
    if kind not in ("q", "k"):
        raise ValueError(f"kind must be 'q' or 'k', got {kind!r}")
    return s.state[f"gram_{kind}_pre"], s.state[f"gram_{kind}_rot"]
