"""Cost of the head atlas against a plain scan, measured in one run on the same prompts.

Rows (CPU time of this process on one thread, so other load on the machine changes little; wall time beside it):

- ``plain``: ``interp.scan`` of the text prompts with the default measures (what ``interp scan`` runs);
- ``atlas_text``: the atlas's text pass (token-matched scores, shape of attention, per-plane InP;
  ``interp.experiments.atlas.atlas_config``), and ``atlas_text_noinp`` without InP (``interp atlas --no-inp``);
- ``atlas_rr``: the repeated-random pass (token-matched scores, echo) on as many prompts of the same length;
- ``atlas``: both passes (what ``interp atlas`` scans; twice the prompts of a plain scan by design), and
  ``atlas_ablate`` with the three band ablations in both passes (``--ablate``).

``ratio`` = seconds / plain seconds. The issue's target (atlas scan / plain scan <= 1.5 without retrieval) is read
per pass of the same prompts (``atlas_text``, ``atlas_rr``); ``atlas`` doubles the prompts. Writes
``figures/atlas_cost.csv``.

    python -m analyses.benchmarks.atlas_cost [--model smollm2-135m] [--prompts 2] [--tokens 1024] [--quick] [--out DIR]
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from dataclasses import replace
from pathlib import Path

import pandas as pd
import torch

from analyses._common import parse_tracked

ROOT = Path(__file__).resolve().parents[2]


def timed(fn) -> tuple[float, float]:
    """``(cpu seconds, wall seconds)`` of ``fn()`` (this process's CPU time: robust to other load on the machine)."""
    c0, w0 = time.process_time(), time.perf_counter()
    fn()
    return time.process_time() - c0, time.perf_counter() - w0


def main(argv: list[str] | None = None) -> pd.DataFrame:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=1024)
    ap.add_argument("--quick", action="store_true", help="tiny-llama, 1 prompt x 64 tokens (for the tests)")
    ap.add_argument("--out", type=Path, default=ROOT / "figures")
    args = parse_tracked(ap, argv, __file__)
    if args.quick:
        args.model, args.prompts, args.tokens = "tiny-llama", 1, 64
    torch.set_num_threads(1)
    import interp
    from interp.engine import ScanConfig, scan
    from interp.experiments.atlas import AtlasConfig, atlas_config
    from interp.rope import band_ablations

    model = interp.load_model(args.model, device="cpu")
    text = interp.corpus.prompts(model, "pydoc", args.prompts, args.tokens)
    rr = interp.corpus.prompts(model, "repeated-random", args.prompts, args.tokens)
    text_cfg, rr_cfg = atlas_config(AtlasConfig())
    bands = band_ablations(model.card.n_rotary_planes, 6 if model.card.n_rotary_planes >= 18 else 2)
    runs = {"plain": lambda: scan(model, text, ScanConfig()),
            "atlas_text": lambda: scan(model, text, text_cfg),
            "atlas_text_noinp": lambda: scan(model, text, replace(text_cfg, inp=False)),
            "atlas_rr": lambda: scan(model, rr, rr_cfg),
            "atlas_text_ablate": lambda: scan(model, text, replace(text_cfg, variants=bands)),
            "atlas_rr_ablate": lambda: scan(model, rr, replace(rr_cfg, variants=bands))}
    scan(model, text[:1, : min(64, args.tokens)], text_cfg)  # warm-up: kernel build, first-call costs
    t = {name: timed(fn) for name, fn in runs.items()}
    t["atlas"] = tuple(a + b for a, b in zip(t["atlas_text"], t["atlas_rr"]))
    t["atlas_ablate"] = tuple(a + b for a, b in zip(t["atlas_text_ablate"], t["atlas_rr_ablate"]))
    base_cpu, base_wall = t["plain"]
    rows = [{"model": args.model, "prompts": args.prompts, "tokens": args.tokens, "run": name, "cpu_s": round(c, 4),
             "wall_s": round(w, 4), "ratio": round(c / base_cpu, 3), "ratio_wall": round(w / base_wall, 3), "threads": 1,
             "load_1min": round(os.getloadavg()[0], 1), "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores"}
            for name, (c, w) in t.items()]
    df = pd.DataFrame(rows)
    args.out.mkdir(parents=True, exist_ok=True)
    df.to_csv(args.out / "atlas_cost.csv", index=False)
    print(df[["run", "cpu_s", "wall_s", "ratio"]].to_string(index=False))
    return df


if __name__ == "__main__":
    main()
