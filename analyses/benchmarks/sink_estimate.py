"""The default pre-RoPE sink weight (a stratified sample of query rows) against the exact one, per head of the zoo.

The scan's default ``sink_weight_norope`` is the mean over ``counterfactual_queries`` (256) stratified query rows per
prompt of the pre-RoPE counterfactual weight on key 0 (``interp.measures.sinks``); ``counterfactual_queries=0`` computes
every query. For each zoo model (8 pydoc prompts x 1024 tokens, the README's protocol) this scans the same prompts
both ways and writes:

- ``figures/sink_estimate_heads.csv``: one row per model, layer, head: ``exact``, ``estimate``, ``abs_error``;
- ``figures/sink_estimate.csv``: one row per model: ``rows`` (sampled rows per prompt), ``max_abs_error``,
  ``mean_abs_error``, ``max_rel_error`` (over heads whose exact weight is >= 0.01), ``has_sink_equal`` (every head's
  ``has_sink`` the same: it reads the RoPE sink weight, so it must), ``other_columns_max_diff`` (the largest scaled
  difference over every other ``heads.csv`` column: ``|a - b| / max(1, |b|)``). The cost of each mode is
  ``scan_speed.py``'s to measure (side by side, on an idle machine), not this script's.

    python -m analyses.benchmarks.sink_estimate [--models ...] [--quick]
"""

from __future__ import annotations

import numpy as np
import pandas as pd

import interp

from analyses._common import parser

KEYS = ["layer", "head"]


def compare(model, prompts, rows: int) -> tuple[pd.DataFrame, dict]:
    """Scan ``prompts`` with the estimate and exactly; ``(per-head table, summary row)``."""
    est = interp.scan(model, prompts, interp.ScanConfig(counterfactual_queries=rows)).heads
    exact = interp.scan(model, prompts, interp.ScanConfig(counterfactual_queries=0)).heads
    heads = exact[KEYS].assign(exact=exact["sink_weight_norope"], estimate=est["sink_weight_norope"])
    heads["abs_error"] = (heads["estimate"] - heads["exact"]).abs()
    big = heads["exact"] >= 0.01
    others = [c for c in exact.columns if c not in (*KEYS, "sink_weight_norope") and pd.api.types.is_numeric_dtype(exact[c])]
    diff = max((float(np.nanmax(np.abs(est[c].astype(float) - exact[c].astype(float)) / np.maximum(1.0, np.abs(exact[c].astype(float)))))
                if exact[c].notna().any() else 0.0) for c in others)
    summary = {"rows": rows, "heads": len(heads), "max_abs_error": heads["abs_error"].max(), "mean_abs_error": heads["abs_error"].mean(),
               "max_rel_error": (heads["abs_error"][big] / heads["exact"][big]).max() if big.any() else float("nan"),
               "has_sink_equal": bool((est["has_sink"] == exact["has_sink"]).all()), "other_columns_max_diff": diff}
    return heads, summary


def main(argv: list[str] | None = None) -> pd.DataFrame:
    ap = parser(__doc__, "tiny-llama, 2 prompts x 96 tokens, 32 rows")
    args = ap.parse_args(argv)
    models = ["tiny-llama"] if args.quick else [m for m in args.models if interp.models.is_installed(m)]
    n, t, rows = (2, 96, 32) if args.quick else (8, 1024, 256)
    per_head, summary = [], []
    for name in models:
        model = interp.load_model(name, device="cpu")
        prompts = interp.corpus.prompts(model, "random" if args.quick else "pydoc", n, t)
        heads, row = compare(model, prompts, rows)
        per_head.append(heads.assign(model=name))
        summary.append({"model": name, "prompts": n, "tokens": t, **row})
        print(summary[-1], flush=True)
    table = pd.DataFrame(summary)
    args.out.mkdir(parents=True, exist_ok=True)
    pd.concat(per_head)[["model", *KEYS, "exact", "estimate", "abs_error"]].to_csv(args.out / "sink_estimate_heads.csv", index=False,
                                                                                float_format="%.6g")
    table.to_csv(args.out / "sink_estimate.csv", index=False, float_format="%.6g")
    print(table.to_string(index=False))
    return table


if __name__ == "__main__":
    main()
