"""Cost of the counterfactual band ablation (issue 7 target: at most 3x a plain scan).

On the same prompts, in one process and one run: a plain ``interp.scan`` (the head-finding report's
measurements), the same plus the three band ablations of paper 004 Table 5 recomputed in the tiled pass
(``ablate``, what the target is about), and that plus the per-plane InP sums (``ablate_inp``, what
``interp ablate`` runs). Times are the minimum over ``--repeats`` after a warm-up. Writes
``figures/ablation_cost.csv``.

    python -m analyses.benchmarks.ablation_cost [--model smollm2-135m] [--prompts 8] [--tokens 1024] [--repeats 2]
"""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path

import pandas as pd
import torch

import interp
from interp.experiments.ablation import band_variants

from analyses._common import parse_tracked

ROOT = Path(__file__).resolve().parents[2]


def _time(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main(argv: list[str] | None = None) -> pd.DataFrame:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["smollm2-135m"])
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=1024)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--out", type=Path, default=ROOT / "figures")
    args = parse_tracked(ap, argv, __file__)
    rows = []
    for name in args.models:
        if not interp.models.is_installed(name):
            print(f"{name}: not installed, skipped")
            continue
        model = interp.load_model(name, device="cpu")
        prompts = interp.corpus.prompts(model, "pydoc", args.prompts, args.tokens)
        plain = interp.ScanConfig()
        abl = interp.ScanConfig(variants=band_variants(model.card.n_rotary_planes))
        abl_inp = interp.ScanConfig(variants=abl.variants, inp=True)
        interp.scan(model, prompts[:1, :128], abl)  # warm-up (kernel build, allocator)
        t_plain = _time(lambda: interp.scan(model, prompts, plain), args.repeats)
        t_abl = _time(lambda: interp.scan(model, prompts, abl), args.repeats)
        t_inp = _time(lambda: interp.scan(model, prompts, abl_inp), args.repeats)
        rows.append({"model": name, "prompts": args.prompts, "tokens": args.tokens, "scan_s": round(t_plain, 2),
                     "ablate_scan_s": round(t_abl, 2), "ratio": round(t_abl / t_plain, 2), "ablate_inp_scan_s": round(t_inp, 2),
                     "ratio_inp": round(t_inp / t_plain, 2), "threads": torch.get_num_threads(),
                     "machine": f"{platform.machine()} {platform.processor()}".strip()})
        print(f"{name}: plain scan {t_plain:.1f} s, with 3 band ablations {t_abl:.1f} s (ratio {t_abl / t_plain:.2f}, target <= 3), "
              f"plus InP {t_inp:.1f} s (ratio {t_inp / t_plain:.2f})")
    df = pd.DataFrame(rows)
    args.out.mkdir(parents=True, exist_ok=True)
    df.to_csv(args.out / "ablation_cost.csv", index=False)
    return df


if __name__ == "__main__":
    main()
