"""Paper 001's length effects with intervals over prompts (claims 001c, 001d, 001e, 001i).

``frayed_rope.py`` reads medians over heads of a sweep of two prompts pooled: no interval says whether a change with
length is more than the prompts' spread. Here every prompt is swept alone (``interp.experiments.sweep`` on that
prompt's prefixes, geometry on, the exact pre-RoPE sink weight), and per prompt and length the median over heads of
each measurement of ``MEASURES`` is kept. The change of a measurement from the shortest length to each longer one is a
per-prompt number; its mean over prompts gets a 95% percentile bootstrap interval over prompts
(``interp.experiments.stats.bootstrap_interval``, ``--boot`` resamples, seed 0), and ``positive`` counts the prompts
whose change is above zero.

Measurements (columns of ``interp scan`` with ``ScanConfig(geometry=True)``; 001's figures in brackets): key and query
stable rank before and after RoPE (``srank_k_pre``, ``srank_k_rot``, ``srank_q_pre``, ``srank_q_rot``; Fig. 4 right),
key FSV ratio after / before RoPE (``fsv_ratio_k``; Fig. 4 middle), q-vs-k silhouette (``silhouette_pre``,
``silhouette_rot``; Fig. 11), sink weight with RoPE and without (``sink_weight``, ``sink_weight_norope``: the pre-RoPE
counterfactual; Fig. 6 left), the largest q.k per query (``max_qk_rot``, ``max_qk_pre``; Fig. 6 right), and
``srank_k_ratio``: the median over heads of ``srank_k_rot / srank_k_pre`` (Fig. 3's tight pre-RoPE clusters turning
into arcs after RoPE: above 1 when the rotation spreads a head's keys).

Writes ``frayed_bootstrap_prompts.csv`` (``model, prompt, length, context, measure, median``: one row per prompt,
length and measurement) and ``frayed_bootstrap.csv`` (``model, measure, length_from, length_to, beyond_context,
prompts, change, change_lo, change_hi, positive, value_from, value_to, boot``).

The committed runs (``figures/provenance.json``): SmolLM2, Gemma-3 and Qwen2.5 within their contexts on this CPU; the
sink beyond the context (001 Fig. 6 at 4-8x: 32768-65536 tokens for SmolLM2) is the ``frayed`` step of
``analyses/benchmarks/device_check.sh`` (one GPU call).

    python -m analyses.p001_frayed.frayed_bootstrap [--models ...] [--lengths 512,1024,2048,4096] [--prompts 16]
        [--boot 2000] [--device cpu] [--corpus pydoc] [--stem frayed_bootstrap] [--quick] [--out DIR]
"""

from __future__ import annotations

import numpy as np
import pandas as pd

import interp
from analyses._common import parser, write_rows
from analyses.p001_frayed._loop import model_runs
from interp.experiments.stats import bootstrap_interval
from interp.experiments.sweep import sweep

MEASURES = ["srank_k_pre", "srank_k_rot", "srank_q_pre", "srank_q_rot", "fsv_ratio_k", "silhouette_pre", "silhouette_rot",
            "sink_weight", "sink_weight_norope", "max_qk_pre", "max_qk_rot"]


def prompt_medians(heads: pd.DataFrame) -> dict[str, float]:
    """Median over heads of every ``MEASURES`` column of one head table, and ``srank_k_ratio`` (module docstring)."""
    out = {m: float(heads[m].median()) for m in MEASURES}
    out["srank_k_ratio"] = float((heads["srank_k_rot"] / heads["srank_k_pre"]).median())
    return out


def changes(per: pd.DataFrame, boot: int) -> pd.DataFrame:
    """``frayed_bootstrap.csv`` rows from ``frayed_bootstrap_prompts.csv`` rows (module docstring): per model, measurement
    and longer length, the per-prompt change from the shortest length, its mean and bootstrap interval over prompts.
    When some lengths lie beyond the model's context, the changes from the longest length inside it are added too
    (``length_from`` = that length): 001 Fig. 6's break is a change past the context, not from the start.

    Raises:
        ValueError: a prompt misses a length (the changes must pair each prompt with itself).
    """
    rows = []
    for (model, measure), g in per.groupby(["model", "measure"], sort=False):
        wide = g.pivot(index="prompt", columns="length", values="median")
        if wide.isna().any().any():
            raise ValueError(f"{model} {measure}: some prompts miss a length; rerun them")
        lengths = sorted(wide.columns)
        context = int(g["context"].iloc[0])
        inside = [n for n in lengths if n <= context]
        bases = [lengths[0]] + ([inside[-1]] if inside and inside[-1] != lengths[0] and lengths[-1] > context else [])
        for base in bases:
            later = [n for n in lengths if n > base]
            d = np.stack([wide[n].to_numpy() - wide[base].to_numpy() for n in later])  # [length, prompt]
            lo, hi = bootstrap_interval(d, boot)
            for k, n in enumerate(later):
                rows.append({"model": model, "measure": measure, "length_from": base, "length_to": n,
                             "beyond_context": n > context, "prompts": d.shape[1], "change": float(d[k].mean()),
                             "change_lo": float(lo[k]), "change_hi": float(hi[k]), "positive": int((d[k] > 0).sum()),
                             "value_from": float(wide[base].mean()), "value_to": float(wide[n].mean()), "boot": boot})
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> pd.DataFrame:
    ap = parser(__doc__, "tiny-llama, 3 random-token prompts at 64 and 128 tokens, 200 resamples")
    ap.add_argument("--lengths", default="512,1024,2048,4096")
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--boot", type=int, default=2000)
    ap.add_argument("--device", default="cpu", help="cpu or cuda (the device_check.sh step)")
    ap.add_argument("--corpus", default="pydoc", help="pydoc, or stdlib for 16 prompts past 7k tokens (pydoc holds 113k tokens)")
    ap.add_argument("--stem", default="frayed_bootstrap",
                    help="table names (<stem>.csv, <stem>_prompts.csv): frayed_bootstrap_beyond for the run past the context")
    args = ap.parse_args(argv)
    lengths = [64, 128] if args.quick else sorted(int(x) for x in args.lengths.split(","))
    n, boot = (3, 200) if args.quick else (args.prompts, args.boot)
    cfg = interp.ScanConfig(geometry=True, cluster_points=100 if args.quick else 1000, counterfactual_queries=0)
    per = []
    for run in model_runs(args, n, max(lengths), corpus=args.corpus, device=args.device):
        name, model, prompts = run.name, run.model, run.prompts
        context = model.card.context_length
        for i in range(n):
            res = sweep(model, prompts[i:i + 1], lengths, cfg, beyond_context=True)
            for length in res.lengths:
                for measure, v in prompt_medians(res.heads(length)).items():
                    per.append({"model": name, "prompt": i, "length": length, "context": context, "measure": measure, "median": v})
            print(f"{name}: prompt {i + 1} of {n} at {lengths} ({run.seconds():.0f} s)", flush=True)
        del model, prompts
    per_df = pd.DataFrame(per)
    summary = changes(per_df, boot)
    merge = not args.quick
    # a run replaces its own lengths' rows only: the CPU run within the context and the GPU run beyond it share the tables
    write_rows(per_df, args.out / f"{args.stem}_prompts.csv", keys=("model", "length"), merge=merge)
    out = write_rows(summary, args.out / f"{args.stem}.csv", keys=("model", "length_from"), merge=merge)
    longest = summary[summary["length_to"] == summary["length_to"].max()]
    print(longest[["model", "measure", "length_to", "change", "change_lo", "change_hi", "positive"]].to_string(
        index=False, float_format=lambda v: f"{v:.3f}"))
    return out


if __name__ == "__main__":
    main()
