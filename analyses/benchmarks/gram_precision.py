"""Error of the spectrum measure's Gram matrices on tensor-core precisions, against float64 (issue 47).

The ``spectrum`` measure sums, per layer and head, the Gram matrix ``G = sum_i x_i x_i^T`` of pre- and post-RoPE
queries and keys (``interp.measures.spectrum.gram``: float32 products, one GEMM per prompt, float64 across prompts) and
reads from it r1, R95, the stable ranks and the FSV ratio (``spectrum_metrics``; 001, 004 eq. 7). On a GPU a float32
GEMM runs on CUDA cores; TF32 or bfloat16 inputs run on tensor cores at several times the rate. This script states
what each would change, per model, on the zoo models' real queries and keys in bfloat16 (the dtype the GPU benchmark
scans in), against the float64 Gram of the same captured vectors:

- ``float32``: the current path (float32 inputs and accumulation);
- ``tf32``: inputs rounded to TF32 (10 mantissa bits), float32 accumulation;
- ``bf16``: inputs rounded to bfloat16 (7 mantissa bits), float32 accumulation. A bf16 model's post-RoPE q / k are
  bf16 already (exact); its pre-RoPE q / k are recovered in float32 (``AttentionCall.pre``), so they round.

``method``: ``hardware`` on a CUDA device (cuBLAS: ``fp32_precision = "tf32"``; ``bmm(..., out_dtype=float32)`` on
bf16 inputs), ``emulated`` on a CPU (the inputs rounded to nearest-even in float32 bits, then a float32 GEMM: the
rounding exactly, the accumulation in the CPU's order, not the tensor cores').

Per model, variant and measurement (``measure``: ``r1``, ``srank_pre``, ``srank_rot``, ``fsv_ratio``, ``fsv_lemma1`` over query and
key heads of every layer): ``max_rel_err`` and ``median_rel_err`` (``|x - x_64| / |x_64|`` over heads), and for the
integer ``R95`` the heads whose count changed (``changed``). Writes ``gram_precision.csv`` (``model, dtype, variant,
method, measure, heads, max_rel_err, median_rel_err, changed, prompts, tokens, device``).

    python -m analyses.benchmarks.gram_precision [--models ...] [--prompts 4] [--tokens 4096] [--device cpu] [--quick]
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

import interp
from analyses._common import parser, write_rows
from analyses.p001_frayed._loop import run_names
from interp.measures.spectrum import fsv_prediction, gram, spectrum_metrics

VARIANTS = ("float64", "float32", "tf32", "bf16")
COLUMNS = ("r1", "R95", "srank_pre", "srank_rot", "fsv_ratio", "fsv_lemma1")


def round_tf32(x: torch.Tensor) -> torch.Tensor:
    """``x`` (float32) rounded to nearest-even at TF32's 10 mantissa bits (finite values; the low 13 bits cleared)."""
    b = x.contiguous().view(torch.int32)
    b = (b + 0x0FFF + ((b >> 13) & 1)) & ~0x1FFF
    return b.view(torch.float32)


def variant_gram(x: torch.Tensor, variant: str) -> torch.Tensor:
    """``[head, d, d]`` float64 Gram ``X^T X`` per head of ``x`` ``[pos, head, d]`` (float32) in one ``VARIANTS`` precision
    (module docstring): on CUDA the scan's own ``interp.measures.spectrum.gram(..., fast=True)`` on float32 (TF32) or
    bf16 inputs; on a CPU ``gram`` of the inputs rounded as the tensor cores would.

    Raises:
        ValueError: an unknown variant.
    """
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; use one of {', '.join(VARIANTS)}")
    if variant == "float64":
        xt = x.transpose(0, 1).double()
        return xt.mT @ xt
    cuda = x.is_cuda
    if variant == "bf16":
        x = x.to(torch.bfloat16) if cuda else x.to(torch.bfloat16).float()
    elif variant == "tf32" and not cuda:
        x = round_tf32(x)
    return gram(x, fast=cuda and variant != "float32")


def metrics(g_pre: torch.Tensor, g_rot: torch.Tensor, pairing: str) -> dict[str, np.ndarray]:
    """``COLUMNS`` per head from summed pre / post-RoPE Grams ``[..., d, d]`` (as the spectrum measure's table)."""
    pre, rot = spectrum_metrics(g_pre), spectrum_metrics(g_rot)
    return {"r1": pre["r1"], "R95": pre["R"], "srank_pre": pre["srank"], "srank_rot": rot["srank"],
            "fsv_ratio": rot["spec_norm"] / pre["spec_norm"], "fsv_lemma1": fsv_prediction(g_pre, pairing)}


def model_rows(model, prompts: torch.Tensor) -> list[dict]:
    """Rows of the table for one loaded model and its prompts ``[prompt, token]``."""
    card = model.card
    sums = {}  # (variant, x, kind) -> [layer, head, d, d] float64
    for p in prompts:
        cap = interp.capture(model, p)
        for x in ("q", "k"):
            for kind in ("pre", "rot"):
                layers = getattr(cap, f"{x}_{kind}")
                for v in VARIANTS:
                    g = torch.stack([variant_gram(t, v).cpu() for t in layers])
                    sums[v, x, kind] = sums.get((v, x, kind), 0) + g
        del cap
    ref = {x: metrics(sums["float64", x, "pre"], sums["float64", x, "rot"], card.pairing) for x in ("q", "k")}
    rows = []
    for v in VARIANTS[1:]:
        got = {x: metrics(sums[v, x, "pre"], sums[v, x, "rot"], card.pairing) for x in ("q", "k")}
        for c in COLUMNS:
            a = torch.cat([got[x][c].flatten() for x in ("q", "k")]).numpy()
            b = torch.cat([ref[x][c].flatten() for x in ("q", "k")]).numpy()
            rel = np.abs(a - b) / np.maximum(np.abs(b), 1e-300)
            rows.append({"model": card.name, "dtype": str(model.dtype).removeprefix("torch."), "variant": v,
                         "method": "hardware" if model.device.type == "cuda" else "emulated", "measure": c, "heads": len(a),
                         "max_rel_err": float(rel.max()), "median_rel_err": float(np.median(rel)),
                         "changed": int((a != b).sum()) if c == "R95" else None,
                         "prompts": len(prompts), "tokens": prompts.shape[1], "device": str(model.device)})
    return rows


def main(argv: list[str] | None = None) -> pd.DataFrame:
    ap = parser(__doc__, "tiny-llama in float32, 2 random-token prompts of 64 tokens")
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args(argv)
    rows = []
    for name in run_names(args):
        model = interp.load_model(name, device=args.device, dtype=None if args.quick else "bfloat16")
        n, tokens = (2, 64) if args.quick else (args.prompts, args.tokens)
        prompts = interp.corpus.prompts(model, "random" if args.quick else "pydoc", n, tokens)
        rows += model_rows(model, prompts)
        print(f"{name}: done", flush=True)
        del model
    df = pd.DataFrame(rows)
    out = write_rows(df, args.out / "gram_precision.csv", keys=("model", "method"), merge=not args.quick)
    print(df.pivot_table(index=["model", "measure"], columns="variant", values="max_rel_err").to_string(float_format=lambda v: f"{v:.1e}"))
    return out


if __name__ == "__main__":
    main()
