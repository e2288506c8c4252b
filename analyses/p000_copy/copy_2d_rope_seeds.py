"""The 2D-RoPE copier of ``copy_2d_rope.py`` over seeds: exact match by length and the geometry of its head.

``analyses/p000_copy/copy_2d_rope.py`` trains every copier once (``--seed``, default 0). Its cheapest headline model, the
1-layer 2D-RoPE copier trained on Imbalanced strings (600 steps, no curriculum; the same ``train_one``, sizes and
test strings, seeded by ``[seed, 1000 + i, j]`` as there), is trained here for each of ``--seeds``; seed 0 is the
committed ``copy.csv`` run, so its rows must equal that table's rope2d rows. For each seed, the model is also
scanned on the report's eight Uniform sequences of 30 bits (``copy_2d_rope.report``'s sequences: ``interp.scan``,
default settings) for the head's pre-RoPE spectrum.

Writes ``figures/copy_2d_rope_seeds.csv`` (``seed, distribution, length_lo, length_hi, exact_match``) and
``figures/copy_2d_rope_heads.csv`` (``seed, layer, head, r1_q, r1_k, R95_q, R95_k, slash_delta, slash_score``),
each with a ``mean`` / ``sd`` summary over seeds in ``figures/copy_2d_rope_seeds_summary.csv``
(``table, measure, distribution, length_lo, length_hi, seeds, mean, sd, min, max``).

    python -m analyses.p000_copy.copy_2d_rope_seeds [--seeds 0 1 2] [--jobs 1] [--quick]
"""

from __future__ import annotations

import multiprocessing as mp
import time

import numpy as np
import pandas as pd

from interp.lab import lab_loaded
from interp.lab.copy_task import DISTRIBUTIONS, copy_vocab, encode_batch, sample_string, sample_strings

from analyses._common import one_thread, parser
from analyses.p000_copy import copy_2d_rope as c2d

SPEC = c2d.FULL_MODELS[0]  # ("rope2d", 1, 1, "imbalanced", 600, False, 1e-3)
QUICK_SPEC = c2d.QUICK_MODELS[0]


def head_table(model, vocab, seed: int) -> pd.DataFrame:
    """Per head of the trained copier: pre-RoPE spectrum and short-lag slash on ``copy_2d_rope.report``'s sequences."""
    import interp

    rng = np.random.default_rng([seed, 7])
    seqs = [encode_batch(vocab, [sample_string("uniform", 30, rng)])["input_ids"][0] for _ in range(8)]
    res = interp.scan(lab_loaded(model, vocab, name="copy-2d-rope"), seqs)
    h = res.heads
    return h[["layer", "head", "r1_q", "r1_k", "R95_q", "R95_k", "slash_delta", "slash_score"]].assign(seed=seed)


def one_seed(job: tuple) -> dict:
    spec, s, seed = job
    vocab = copy_vocab()
    tests = {(dist, lo, hi): sample_strings(dist, count, lo, hi, np.random.default_rng([seed, 1000 + i, j]))
             for i, dist in enumerate(DISTRIBUTIONS) for j, (lo, hi, count) in enumerate(s["bins"])}
    t0 = time.perf_counter()
    r = c2d.train_one((spec, s, seed, tests))
    model = c2d._rebuild(r)
    return {"rows": r["rows"], "heads": head_table(model, vocab, seed), "seconds": time.perf_counter() - t0, "seed": seed}


def summary(em: pd.DataFrame, heads: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for (d, lo, hi), g in em.groupby(["distribution", "length_lo", "length_hi"], sort=False):
        x = g["exact_match"]
        rows.append({"table": "copy_2d_rope_seeds.csv", "measure": "exact_match", "distribution": d, "length_lo": lo, "length_hi": hi,
                     "seeds": len(x), "mean": x.mean(), "sd": x.std(ddof=1) if len(x) > 1 else np.nan, "min": x.min(), "max": x.max()})
    for m in ("r1_q", "r1_k", "R95_q", "R95_k"):
        x = heads[m]
        rows.append({"table": "copy_2d_rope_heads.csv", "measure": m, "distribution": "", "length_lo": np.nan, "length_hi": np.nan,
                     "seeds": heads["seed"].nunique(), "mean": x.mean(), "sd": x.std(ddof=1) if len(x) > 1 else np.nan,
                     "min": x.min(), "max": x.max()})
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> dict:
    ap = parser(__doc__, "the quick 2D-RoPE copier (20 steps), seeds 0 1")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--jobs", type=int, default=1, help="worker processes (each one torch thread)")
    args = ap.parse_args(argv)
    spec, s = (QUICK_SPEC, c2d.QUICK) if args.quick else (SPEC, c2d.FULL)
    if args.quick:
        args.seeds = [0, 1]
    args.out.mkdir(parents=True, exist_ok=True)
    work = [(spec, s, seed) for seed in args.seeds]
    with one_thread():
        if args.jobs > 1:
            with mp.get_context("fork").Pool(args.jobs) as pool:
                results = pool.map(one_seed, work, chunksize=1)
        else:
            results = [one_seed(w) for w in work]
    for r in results:
        print(f"seed {r['seed']}: {r['seconds']:.0f} s", flush=True)
    em = pd.DataFrame([{k: row[k] for k in ("seed", "distribution", "length_lo", "length_hi", "exact_match")}
                       for r in results for row in r["rows"]])
    heads = pd.concat([r["heads"] for r in results], ignore_index=True)
    heads = heads[["seed", "layer", "head", "r1_q", "r1_k", "R95_q", "R95_k", "slash_delta", "slash_score"]]
    em.to_csv(args.out / "copy_2d_rope_seeds.csv", index=False)
    heads.round(5).to_csv(args.out / "copy_2d_rope_heads.csv", index=False)
    sm = summary(em, heads)
    sm.round(5).to_csv(args.out / "copy_2d_rope_seeds_summary.csv", index=False)
    print(heads.to_string(index=False))
    print(sm.to_string(index=False))
    return {"exact_match": em, "heads": heads, "summary": sm}


if __name__ == "__main__":
    main()
