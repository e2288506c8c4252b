"""Cost of the length sweep's geometry (issue 23 target: at most 1.5x a plain scan per length, finalisation < 10 s).

On the same prompts, in one process, for each length n: a plain ``interp.scan`` of the prefixes
``prompts[:, :n]`` (the head-finding report's measurements) and the sweep at that length
(``interp.experiments.sweep``: the same scan with ``ScanConfig(geometry=True)``, i.e. plus the cluster scores,
key norms, attention received and max q.k per query of paper 001, then the head table). Times are CPU seconds
of this process (``time.process_time``, one torch thread by default, so that other processes on a shared machine
slow it less than they slow the wall clock), the minimum over ``--repeats`` after a warm-up; ``ratio`` = sweep scan
/ plain scan in CPU time, ``ratio_wall`` the same in wall-clock time, ``finalise_s`` = the sweep's head table at that
length (wall). ``load_1min`` is the machine's 1-minute load average when the length started (``os.getloadavg``).

With ``--check`` the cluster scores are also recomputed with scikit-learn (``silhouette_score``,
``davies_bouldin_score``, one call per head as before issue 23) on the same seeded positions of the
first prompt, and the largest absolute difference is reported (``max_abs_diff_sklearn``).

Writes ``figures/sweep_cost.csv``.

    python -m analyses.benchmarks.sweep_cost [--model smollm2-135m] [--prompts 2] [--lengths 256 512 1024 2048] [--repeats 2] [--check]
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

import interp
from interp.engine import ScanConfig, scan
from interp.experiments.sweep import sweep
from interp.hooks.capture import capture
from interp.measures import geometry

from analyses._common import parse_tracked

ROOT = Path(__file__).resolve().parents[2]


def _best(fn, repeats: int):
    """(minimum CPU seconds, minimum wall seconds over ``repeats`` calls, the last call's value)."""
    cpu, wall, value = float("inf"), float("inf"), None
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        value = fn()
        cpu, wall = min(cpu, time.process_time() - c0), min(wall, time.perf_counter() - t0)
    return cpu, wall, value


def machine() -> str:
    """CPU model and core count (``/proc/cpuinfo`` where there is one)."""
    name = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{name}, {os.cpu_count()} cores"


def sklearn_cluster_scores(q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """``[2, head]``: scikit-learn's silhouette and Davies-Bouldin per head (the pre-issue-23 implementation)."""
    from sklearn.metrics import davies_bouldin_score, silhouette_score

    H, g = q.shape[1], q.shape[1] // k.shape[1]
    qs, ks = q[positions].double().numpy(), k[positions].double().numpy()
    labels = np.r_[np.zeros(len(positions)), np.ones(len(positions))]
    out = torch.empty(2, H, dtype=torch.float64)
    for h in range(H):
        x = np.concatenate([qs[:, h], ks[:, h // g]])
        out[0, h], out[1, h] = silhouette_score(x, labels), davies_bouldin_score(x, labels)
    return out


def check_against_sklearn(model, tokens: torch.Tensor, n_points: int) -> tuple[float, float, float]:
    """Largest |ours - scikit-learn| of the cluster scores over layers, heads, pre/rot; and both codes' seconds."""
    cap = capture(model, tokens)
    worst, t_ours, t_ref = 0.0, 0.0, 0.0
    for layer in range(model.card.n_layers):
        pos = geometry.sample_positions(tokens.numel(), n_points, layer)
        for q, k in ((cap.q_pre[layer], cap.k_pre[layer]), (cap.q_rot[layer], cap.k_rot[layer])):
            t0 = time.perf_counter()
            ours = geometry.cluster_scores(q, k, pos)
            t1 = time.perf_counter()
            ref = sklearn_cluster_scores(q, k, pos)
            t_ours, t_ref = t_ours + t1 - t0, t_ref + time.perf_counter() - t1
            worst = max(worst, float((ours - ref).abs().max()))
    return worst, t_ours, t_ref


def main(argv: list[str] | None = None) -> pd.DataFrame:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--lengths", type=int, nargs="+", default=[256, 512, 1024, 2048])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1: steadier timings on a shared machine)")
    ap.add_argument("--check", action="store_true", help="also compare the cluster scores with scikit-learn")
    ap.add_argument("--quick", action="store_true", help="tiny-llama, lengths 32 64, one repeat (for the tests)")
    ap.add_argument("--out", type=Path, default=ROOT / "figures")
    args = parse_tracked(ap, argv, __file__)
    if args.quick:
        args.model, args.lengths, args.repeats, args.prompts = "tiny-llama", [32, 64], 1, 2
    torch.set_num_threads(args.threads)
    model = interp.load_model(args.model, device="cpu")
    prompts = interp.corpus.prompts(model, "pydoc", args.prompts, max(args.lengths))
    cfg = ScanConfig(geometry=True)
    sweep(model, prompts[:1, :64], [64], cfg)  # warm-up (kernel build, allocator)
    rows = []
    for n in sorted(args.lengths):
        pre = prompts[:, :n]
        load = os.getloadavg()[0]
        c_plain, w_plain, plain = _best(lambda: scan(model, pre, ScanConfig()), args.repeats)
        _, t_heads, _ = _best(lambda: plain.heads, args.repeats)
        runs = [sweep(model, prompts, [n], cfg).seconds[n] for _ in range(args.repeats)]
        c_sweep, w_sweep = min(r["scan_cpu"] for r in runs), min(r["scan"] for r in runs)
        t_fin = min(r["finalise"] for r in runs)
        row = {"model": args.model, "prompts": args.prompts, "length": n, "cluster_points": cfg.cluster_points,
               "max_qk_queries": cfg.max_qk_queries, "scan_s": round(c_plain, 2), "sweep_scan_s": round(c_sweep, 2),
               "ratio": round(c_sweep / c_plain, 2), "scan_wall_s": round(w_plain, 2), "sweep_scan_wall_s": round(w_sweep, 2),
               "ratio_wall": round(w_sweep / w_plain, 2), "scan_heads_s": round(t_heads, 2), "finalise_s": round(t_fin, 2)}
        if args.check:
            diff, t_ours, t_ref = check_against_sklearn(model, prompts[0, :n], cfg.cluster_points)
            row.update({"max_abs_diff_sklearn": diff, "cluster_s": round(t_ours, 2), "cluster_sklearn_s": round(t_ref, 2)})
        row.update({"threads": args.threads, "load_1min": round(load, 1), "machine": machine()})
        rows.append(row)
        print(f"{args.model}, {args.prompts} prompts x {n} tokens (load {load:.1f}): plain scan {c_plain:.2f} s CPU, sweep scan "
              f"{c_sweep:.2f} s CPU (ratio {c_sweep / c_plain:.2f}, target <= 1.5; wall {w_sweep / w_plain:.2f}), finalise {t_fin:.2f} s (target < 10)"
              + (f"; cluster scores {row['cluster_s']} s vs scikit-learn {row['cluster_sklearn_s']} s, max |diff| {row['max_abs_diff_sklearn']:.1e}"
                 if args.check else ""), flush=True)
    df = pd.DataFrame(rows)
    args.out.mkdir(parents=True, exist_ok=True)
    df.to_csv(args.out / "sweep_cost.csv", index=False)
    return df


if __name__ == "__main__":
    main()
