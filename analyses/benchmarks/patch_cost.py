"""Cost of activation patching every head (``interp patch``) against one forward over the pairs and against the naive
loop, in one run.

On the same pairs (``--pairs`` IOI pairs of ``interp.experiments.patch_tasks.ioi_pairs``, seed 0), in one process, one
after the other:

- ``forward``: one batched forward of the model over the pairs' corrupt prompts, reading the last position's logits
  (``logits_to_keep=1``, what the metric reads): the unit of ``ratio``;
- ``patch``: ``interp.experiments.patching.patch_heads`` on every head, denoising: one corrupt and one clean pass
  caching ``resid_pre`` / ``head_out``, then for the heads of layer l only layers l..L-1, heads x pairs as batch rows;
- ``naive``: ``naive_patch_heads``, one full forward per head and pair. With ``--naive-heads K`` only K heads spread
  over the layers run and the time is scaled to every head by the forwards run (``P (K + 2)`` measured, ``P (L H + 2)``
  for every head: the source and base forwards of each pair included; ``extrapolated`` says so); the default runs
  every head;
- ``attribution``: ``attribution_patch_heads`` (Nanda 2023; Syed et al. 2023: one clean forward, one corrupt forward
  and backward for every head), and ``spearman``: its rank correlation with the exact ``ld`` over every head.

``ratio`` = seconds / ``forward`` seconds; ``ratio_cpu`` the same from this process's CPU time (steadier on a shared
machine); ``speedup`` (``patch`` row) = naive seconds / patch seconds; ``max_abs_diff`` = the largest per-pair LD
difference between the fast path and the naive loop over the heads both ran (the tests hold it under 1e-4). One
warm-up of each method on one layer first. Writes ``figures/patch_cost.csv`` (replacing the rows of the same model and
device).

    python -m analyses.benchmarks.patch_cost [--model smollm2-135m] [--pairs 64] [--naive-heads K] [--threads 1]
        [--quick] [--out DIR]

``--quick``: tiny-llama on 4 induction pairs (its byte tokenizer has no one-token names), every head (for the tests).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from analyses._common import parse_tracked, write_rows
from analyses.benchmarks.effects_cost import CPU_S, machine_name, spread_heads, timed

ROOT = Path(__file__).resolve().parents[2]


def main(argv: list[str] | None = None) -> pd.DataFrame:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--pairs", type=int, default=64)
    ap.add_argument("--naive-heads", type=int, default=0, help="heads of the naive loop (0: all)")
    ap.add_argument("--threads", type=int, default=1, help="CPU threads (torch.set_num_threads)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--quick", action="store_true", help="tiny-llama, 4 induction pairs, every head (for the tests)")
    ap.add_argument("--out", type=Path, default=ROOT / "figures")
    args = parse_tracked(ap, argv, __file__)
    if args.quick:
        args.model, args.pairs = "tiny-llama", 4
    torch.set_num_threads(args.threads)
    import interp
    from scipy.stats import spearmanr

    from interp.experiments.patch_tasks import induction_pairs, ioi_pairs
    from interp.experiments.patching import PatchConfig, attribution_patch_heads, naive_patch_heads, patch_heads

    model = interp.load_model(args.model, device=args.device)
    pairs = induction_pairs(model.tokenizer, args.pairs, 0, half=8) if args.quick else ioi_pairs(model.tokenizer, args.pairs, 0)
    L, H = model.card.n_layers, model.card.n_heads
    naive_heads = spread_heads(L, H, args.naive_heads) if 0 < args.naive_heads < L * H else None
    cfg = PatchConfig(bootstrap=1000)
    warm = PatchConfig(heads=tuple((L - 1, h) for h in range(H)), bootstrap=0)  # first-call costs, one layer
    patch_heads(model, pairs[:2], warm)
    naive_patch_heads(model, pairs[:1], PatchConfig(heads=((L - 1, 0),), bootstrap=0))
    attribution_patch_heads(model, pairs[:2], warm)

    lengths = {len(p.corrupt) for p in pairs}

    def forward():
        with torch.inference_mode():
            for n in lengths:
                ids = torch.tensor([p.corrupt for p in pairs if len(p.corrupt) == n], device=model.device)
                model.hf(ids, use_cache=False, logits_to_keep=1)
        return object()

    t_fwd, f = timed(forward, args.device)
    t_patch, fast = timed(lambda: patch_heads(model, pairs, cfg), args.device)
    t_attr, attr = timed(lambda: attribution_patch_heads(model, pairs, cfg), args.device)
    t_naive, slow = timed(lambda: naive_patch_heads(model, pairs, PatchConfig(heads=naive_heads, bootstrap=0)), args.device)
    runs_all, runs_naive = L * H * len(pairs), (len(naive_heads) if naive_heads else L * H) * len(pairs)
    # the naive loop runs 2 unpatched forwards per pair beside one per head and pair: scale by forwards, not heads
    scale = (runs_all + 2 * len(pairs)) / (runs_naive + 2 * len(pairs))
    rows_of = {k: i for i, k in enumerate(zip(fast.table["layer"], fast.table["head"]))}
    shared = [rows_of[k] for k in zip(slow.table["layer"], slow.table["head"])]
    diff = float(np.abs(fast.per_pair[shared] - slow.per_pair).max())
    base = {"model": args.model, "device": machine_name(args.device, args.threads), "pairs": len(pairs),
            "tokens": ",".join(str(n) for n in sorted(lengths)), "heads": L * H, "clean_ld": float(fast.clean.mean()),
            "corrupt_ld": float(fast.corrupt.mean()), "clean_accuracy": fast.meta["clean_accuracy"]}
    rows = [
        {**base, "run": "forward", "seconds": t_fwd, "cpu_s": CPU_S[id(f)], "runs": len(pairs), "extrapolated": False},
        {**base, "run": "patch", "seconds": t_patch, "cpu_s": CPU_S[id(fast)], "runs": runs_all, "extrapolated": False,
         "rows_per_forward": fast.meta["rows_per_forward"], "unpatched_passes_s": fast.meta["unpatched_passes"]},
        {**base, "run": "naive", "seconds": t_naive * scale, "cpu_s": CPU_S[id(slow)] * scale, "runs": runs_all,
         "extrapolated": naive_heads is not None, "measured_s": t_naive, "measured_runs": runs_naive},
        {**base, "run": "attribution", "seconds": t_attr, "cpu_s": CPU_S[id(attr)], "runs": len(pairs), "extrapolated": False,
         "spearman": float(spearmanr(attr.table["ld"], fast.table["ld"]).statistic)},
    ]
    df = pd.DataFrame(rows)
    df["ratio"] = df["seconds"] / t_fwd
    df["ratio_cpu"] = df["cpu_s"] / CPU_S[id(f)]
    df["speedup"] = np.where(df["run"] == "patch", t_naive * scale / t_patch, np.nan)
    df["max_abs_diff"] = np.where(df["run"].isin(["patch", "naive"]), diff, np.nan)
    write_rows(df, args.out / "patch_cost.csv", ("model", "device"))
    print(df[["run", "seconds", "cpu_s", "runs", "ratio", "ratio_cpu", "speedup", "max_abs_diff", "extrapolated"]]
          .to_string(index=False))
    print(f"clean LD {base['clean_ld']:.3f} (accuracy {base['clean_accuracy']:.0%}), corrupt LD {base['corrupt_ld']:.3f}; "
          f"attribution vs exact: Spearman {rows[-1]['spearman']:.3f} over {L * H} heads")
    return df


if __name__ == "__main__":
    t0 = time.perf_counter()
    main()
    print(f"{time.perf_counter() - t0:.1f} s")
