"""How the atlas's role counts move with the prompt set: another corpus and longer prompts (issue 33, part 3).

``head_atlas.py`` labels every head from one prompt set (8 pydoc prompts of 1024 tokens, and a repeated-random pass of
the same size). A role count depends on that set. This script runs the same atlas (``run_atlas``: the text pass and
the repeated-random pass, no band ablation, no InP, no support, no retrieval pass) on other prompt sets
(``--sets CORPUS:TOKENS ...``, default ``stdlib:1024 pydoc:2048``: Python's standard-library sources, a second text
corpus, at the same length; the language reference at twice the length) and counts each role's heads.

Writes ``atlas_spread.csv``: ``model, corpus, tokens, prompts, role, heads, labelled, labelled_pydoc1024, labelled_both,
seconds`` (``labelled_pydoc1024``: the count in the committed ``atlas_<model>.csv``; ``labelled_both``: heads labelled
in both, so a stable count of different heads is told from the same heads). ``retrieval`` is not listed (it comes from
the needle pass, not from the prompt set). Rows of other models and sets already in the table are kept, so the grid
can run in pieces.

    python -m analyses.atlas.atlas_spread [--models ...] [--sets stdlib:1024 pydoc:2048] [--prompts 8] [--quick] [--out DIR]
"""

from __future__ import annotations

import time

import pandas as pd
import torch

import interp
from interp.experiments.atlas import ROLE_NAMES, AtlasConfig, run_atlas

from analyses._common import FIGURES, installed, parse_set, parser, write_rows
from analyses.atlas.atlas_null import labelled_heads


def spread_rows(model, name: str, corpus: str, tokens: int, prompts: int, committed: pd.DataFrame | None) -> list[dict]:
    """One row per role of ``model``'s atlas on ``prompts`` prompts of ``corpus`` x ``tokens`` (module docstring)."""
    t0 = time.perf_counter()
    cfg = AtlasConfig(corpus=corpus, prompts=prompts, tokens=tokens, ablate=False, inp=False, support=0)
    table = run_atlas(model, cfg).table
    secs = time.perf_counter() - t0
    heads = model.card.n_layers * model.card.n_heads
    rows = []
    for role in ROLE_NAMES:
        if role == "retrieval" or f"role_{role}" not in table:
            continue
        here = labelled_heads(table, role)
        base = labelled_heads(committed, role) if committed is not None else None
        rows.append({"model": name, "corpus": corpus, "tokens": tokens, "prompts": prompts, "role": role, "heads": heads,
                     "labelled": len(here), "labelled_pydoc1024": None if base is None else len(base),
                     "labelled_both": None if base is None else len(here & base), "seconds": round(secs, 1)})
    return rows


def main(argv: list[str] | None = None) -> pd.DataFrame:
    """Write ``atlas_spread.csv`` (see the module docstring)."""
    ap = parser(__doc__, "tiny-llama, pydoc:48 and stdlib:48, 2 prompts")
    ap.add_argument("--sets", nargs="+", default=["stdlib:1024", "pydoc:2048"], help="CORPUS:TOKENS prompt sets")
    ap.add_argument("--prompts", type=int, default=8)
    args = ap.parse_args(argv)
    if args.quick:
        args.models, args.sets, args.prompts = ["tiny-llama"], ["pydoc:48", "stdlib:48"], 2
    sets = [parse_set(s) for s in args.sets]
    args.out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    rows = []
    for name in installed(args.models):
        model = interp.load_model(name, device="cpu")
        path = FIGURES / f"atlas_{name}.csv"
        committed = pd.read_csv(path) if path.exists() and not args.quick else None
        for corpus, tokens in sets:
            new = spread_rows(model, name, corpus, tokens, args.prompts, committed)
            rows += new
            print(f"{name} {corpus}:{tokens}: " + ", ".join(f"{r['role']} {r['labelled']}" for r in new), flush=True)
    df = write_rows(pd.DataFrame(rows), args.out / "atlas_spread.csv", ("model", "corpus", "tokens", "role"), merge=not args.quick)
    print(df.to_string(index=False))
    return df


if __name__ == "__main__":
    main()
