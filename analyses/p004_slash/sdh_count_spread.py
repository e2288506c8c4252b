"""How the SDH count moves with the prompt set: another corpus and longer prompts (issue 33, part 3).

``sdh_count_bootstrap.py`` gives each model's SDH count with a bootstrap interval over prompts of one corpus (pydoc) and
one length (1024 tokens). A count depends on both. This script repeats the count, with the same bootstrap (each prompt
scanned alone, ``--boot`` resamples of the prompts, 2.5 / 97.5 percentiles), for other prompt sets:
``--sets CORPUS:TOKENS ...`` (default ``stdlib:1024 pydoc:2048``: Python's standard-library sources, a second text
corpus, at the same length; and the language reference at twice the length). An SDH is a head whose best short-lag
average slash score is >= kappa = 0.1 (004 Def. 3.1), as everywhere in ``interp``.

Writes ``sdh_count_spread.csv``: ``model, corpus, prompts, tokens, heads, sdh_count, sdh_lo, sdh_hi, pairs, pairs_lo,
pairs_hi, sdh_sure, heads_straddling, boot, seconds`` (one row per model and prompt set; the pydoc 1024-token row of
each model is in ``sdh_count_bootstrap.csv``). Rows of other models and prompt sets already in the table are kept, so
the grid can run in pieces.

    python -m analyses.p004_slash.sdh_count_spread [--models ...] [--sets stdlib:1024 pydoc:2048] [--prompts 8] [--boot 10000] [--quick] [--out DIR]
"""

from __future__ import annotations

import time

import pandas as pd

import interp

from analyses._common import parse_set, parser, write_rows
from analyses.p004_slash.band_ablation import boot_index
from analyses.p004_slash.sdh_count_bootstrap import KAPPA, count_table, per_prompt_scans

COLUMNS = ["model", "corpus", "prompts", "tokens", "heads", "sdh_count", "sdh_lo", "sdh_hi", "pairs", "pairs_lo", "pairs_hi",
           "sdh_sure", "heads_straddling", "boot", "seconds"]


def main(argv: list[str] | None = None) -> pd.DataFrame:
    """Write ``sdh_count_spread.csv`` (see the module docstring)."""
    ap = parser(__doc__, "tiny-llama, random and repeated-random prompts of 64 tokens, 200 replicates")
    ap.add_argument("--sets", nargs="+", default=["stdlib:1024", "pydoc:2048"], help="CORPUS:TOKENS prompt sets")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--boot", type=int, default=10000)
    args = ap.parse_args(argv)
    models = ["tiny-llama"] if args.quick else [m for m in args.models if interp.models.is_installed(m)]
    sets = [("random", 64), ("repeated-random", 64)] if args.quick else [parse_set(s) for s in args.sets]
    reps = 200 if args.quick else args.boot
    kappa = 0.045 if args.quick else KAPPA  # random-weight tiny-llama: see sdh_count_bootstrap.py
    cfg = interp.ScanConfig(counterfactual_sinks=False, kappa=kappa)
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in models:
        model = interp.load_model(name, device="cpu")
        for corpus, tokens in sets:
            if tokens > model.card.context_length:
                print(f"{name}: {corpus}:{tokens} skipped (context {model.card.context_length})", flush=True)
                continue
            t0 = time.perf_counter()
            prompts = interp.corpus.prompts(model, corpus, args.prompts, tokens)
            per, _ = per_prompt_scans(model, prompts, cfg)
            row = {"model": name, "corpus": corpus, "prompts": args.prompts, "tokens": tokens,
                   "heads": model.card.n_layers * model.card.n_heads,
                   **count_table(per["slash"], boot_index(args.prompts, reps), kappa), "boot": reps,
                   "seconds": round(time.perf_counter() - t0, 1)}
            rows.append(row)
            print(f"{name} {corpus}:{tokens}: {row['sdh_count']} SDHs [{row['sdh_lo']:.0f}, {row['sdh_hi']:.0f}], "
                  f"{row['seconds']:.0f} s", flush=True)
        del model
    # keep the rows of other models and prompt sets (runs in pieces)
    df = write_rows(pd.DataFrame(rows)[COLUMNS], args.out / "sdh_count_spread.csv", ("model", "corpus", "tokens"),
                    merge=not args.quick)
    print(df.to_string(index=False))
    return df


if __name__ == "__main__":
    main()
