"""Prompts per second of the scan: one process against 1 and 2 local Ray workers (issue 12).

On the same prompts, in one run: ``interp.scan`` in this process (torch's default threads), then
``interp.engine.executor.run_sharded(executor="ray")`` with 1 and with 2 workers (one thread each). Worker start-up
(process + model load) is timed apart from the scan itself, since a long scan pays it once. On a 2-core
machine no gain beyond the cores is expected: the point is that the same command spreads over a
cluster's machines. Writes ``figures/ray_throughput.csv``.

    python -m analyses.benchmarks.ray_throughput [--model smollm2-135m] [--prompts 8] [--tokens 512] [--quick]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import pandas as pd

import interp
from interp.engine.executor import ModelSpec, ray_workers, run_sharded

from analyses._common import parse_tracked

ROOT = Path(__file__).resolve().parents[2]


def main(argv: list[str] | None = None) -> pd.DataFrame:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--quick", action="store_true", help="tiny-llama, 4 prompts x 64 tokens")
    ap.add_argument("--out", type=Path, default=ROOT / "figures")
    args = parse_tracked(ap, argv, __file__)
    import ray

    name, n, t = ("tiny-llama", 4, 64) if args.quick else (args.model, args.prompts, args.tokens)
    model = interp.load_model(name, device="cpu")
    prompts = interp.corpus.prompts(model, "random" if args.quick else "pydoc", n, t)
    interp.scan(model, prompts[:1])  # warm-up (kernel build, first-call costs)
    t0 = time.perf_counter()
    interp.scan(model, prompts)
    rows = [{"mode": "single process", "workers": 0, "startup_s": 0.0, "scan_s": time.perf_counter() - t0}]
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        for w in (1, 2):
            t0 = time.perf_counter()
            actors = ray_workers(ModelSpec(name), w)
            ray.get([a.pid.remote() for a in actors])  # started and loaded
            startup = time.perf_counter() - t0
            run_sharded(ModelSpec(name), prompts[:w], executor="ray", actors=actors)  # warm-up on every worker
            t0 = time.perf_counter()
            run_sharded(ModelSpec(name), prompts, executor="ray", actors=actors)
            rows.append({"mode": f"ray, {w} worker" + ("s" if w > 1 else ""), "workers": w, "startup_s": startup,
                         "scan_s": time.perf_counter() - t0})
            for a in actors:
                ray.kill(a)
    finally:
        ray.shutdown()
    df = pd.DataFrame(rows).assign(model=name, prompts=n, tokens=t)
    df["prompts_per_s"] = n / df["scan_s"]
    df["speed_vs_single"] = df["prompts_per_s"] / df["prompts_per_s"].iloc[0]
    args.out.mkdir(parents=True, exist_ok=True)
    df.to_csv(args.out / "ray_throughput.csv", index=False)
    print(df.to_string(index=False))
    return df


if __name__ == "__main__":
    main()
