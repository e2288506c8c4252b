"""Which heads carry a behaviour (issue 44 part 3): activation patching on IOI-style and induction pairs, path patching
into the top IOI heads, attribution against exact, on the zoo models, joined with the atlas and the effects table.

Per model (``--models``, installed ones), all with ``interp.experiments.patching`` and the seeded built-in tasks of
``interp.experiments.patch_tasks`` (``--pairs`` pairs, seed 0):

- **ioi** (Wang et al. 2022 templates, ABC corruption: the second occurrence of the subject replaced by a third
  name): every head's ``head_out`` denoised (corrupt run, clean value at every position), ``recovered`` with a 95%
  bootstrap over pairs; the same by attribution patching (Nanda 2023) and Spearman's rho with exact over heads;
- **induction** (BOS, r, r of random tokens; corrupt: a fresh second half): every head denoised, as above;
- **greater-than** (Hanna et al. 2023) where the tokenizer has two-digit year tokens (none of the zoo's do: the row
  says so);
- **paths** (Wang et al. 2022, Sec. 3.1): senders = every head of a layer before the latest of the ``--receivers``
  top IOI heads (by ``recovered``), receivers those of them after each sender, through their query, key and value separately
  (``path_patch``, on ``--path-pairs`` of the pairs): which earlier heads act on the name-mover-like heads, and how.

Every head row carries the atlas' roles and scores (``figures/atlas_<model>.csv``: ``role_*``, ``is_sdh``,
``has_sink``, ``rr_induction_score``, ``prev_token_score``) and the effects table's zero-ablation ``dnll``
(``figures/effects_<model>.csv``) where they exist.

Writes ``figures/patch_heads.csv`` (one row per model, task and head), ``figures/patch_paths.csv`` (one row per model,
sender, receiver and input) and ``figures/patch_summary.csv`` (per model and task: clean and corrupt LD, clean
accuracy, the top heads, attribution's rho; or why a task could not run).

    python -m analyses.effects.patching_zoo [--models ...] [--pairs 32] [--path-pairs 16] [--receivers 3] [--quick]
        [--out DIR]
"""

from __future__ import annotations

import time
from pathlib import Path

import pandas as pd

from analyses._common import FIGURES, atlas_of, load_cpu, parser, run_models, write_rows

ATLAS_COLUMNS = ("role_induction", "role_previous_token", "role_duplicate_token", "role_retrieval", "role_echo",
                 "role_sdh", "is_sdh", "has_sink", "rr_induction_score", "prev_token_score", "sink_weight")


def annotate(table: pd.DataFrame, atlas: pd.DataFrame | None, model_name: str, figures: Path = FIGURES) -> pd.DataFrame:
    """``table`` (``layer, head, ...``) with the ``atlas``' columns of ``ATLAS_COLUMNS`` and the zero-ablation ``dnll``
    of the effects table (``figures/effects_<model>.csv``, as ``effects_dnll``) joined on ``(layer, head)``; columns
    absent where the tables are."""
    out = table.copy()
    if atlas is not None:
        cols = [c for c in ATLAS_COLUMNS if c in atlas.columns]
        out = out.merge(atlas[["layer", "head", *cols]], on=["layer", "head"], how="left")
    effects = figures / f"effects_{model_name}.csv"
    if effects.exists():
        e = pd.read_csv(effects)
        e = e[e["intervention"] == "zero"][["layer", "head", "dnll"]].rename(columns={"dnll": "effects_dnll"})
        out = out.merge(e, on=["layer", "head"], how="left")
    return out


def top_heads(table: pd.DataFrame, k: int) -> list[tuple[int, int]]:
    """The ``k`` heads with the largest ``recovered`` (NaN last), as ``(layer, head)``."""
    t = table.sort_values("recovered", ascending=False, na_position="last").head(k)
    return [(int(l), int(h)) for l, h in zip(t["layer"], t["head"])]


def main(argv: list[str] | None = None) -> pd.DataFrame:
    ap = parser(__doc__, "tiny-llama: induction pairs only (its byte tokenizer has no one-token names), 4 pairs, "
                         "paths on 2 of them")
    ap.add_argument("--pairs", type=int, default=32, help="pairs per task")
    ap.add_argument("--path-pairs", type=int, default=16, help="pairs of the path-patching run")
    ap.add_argument("--receivers", type=int, default=3, help="top IOI heads taken as path-patching receivers")
    args = ap.parse_args(argv)
    from scipy.stats import spearmanr

    from interp.errors import InterpError
    from interp.experiments.patch_tasks import task_pairs
    from interp.experiments.path_patching import path_patch
    from interp.experiments.patching import PatchConfig, attribution_patch_heads, patch_heads

    if args.quick:
        args.pairs, args.path_pairs = 4, 2
    heads_rows, path_rows, summary = [], [], []
    for name in run_models(args):
        model = load_cpu(name)
        try:
            atlas = atlas_of(model, args.quick)
        except FileNotFoundError:
            atlas = None
        tasks = ("induction",) if args.quick else ("ioi", "induction", "greater-than")
        ioi_table = None
        for task in tasks:
            t0 = time.perf_counter()
            try:
                pairs = task_pairs(task, model.tokenizer, args.pairs, 0)
            except InterpError as err:
                summary.append({"model": name, "task": task, "pairs": 0, "note": str(err)})
                continue
            res = patch_heads(model, pairs, PatchConfig(bootstrap=1000))
            attr = attribution_patch_heads(model, pairs, PatchConfig(bootstrap=0))
            rho = float(spearmanr(attr.table["ld"], res.table["ld"]).statistic)
            t = annotate(res.table, atlas, name)
            t["attribution_recovered"] = attr.table["recovered"].to_numpy()
            t.insert(0, "task", task)
            t.insert(0, "model", name)
            heads_rows.append(t)
            top = top_heads(res.table, 5)
            summary.append({"model": name, "task": task, "pairs": len(pairs), "tokens": len(pairs[0].clean),
                            "clean_ld": float(res.clean.mean()), "corrupt_ld": float(res.corrupt.mean()),
                            "clean_accuracy": res.meta["clean_accuracy"],
                            "corrupt_accuracy": float((res.corrupt > 0).mean()),
                            "top_heads": " ".join(f"L{l}H{h}" for l, h in top),
                            "top_recovered": " ".join(f"{r:.2f}" for r in res.table.set_index(["layer", "head"])
                                                      .loc[top, "recovered"]),
                            "attribution_spearman": rho, "seconds": time.perf_counter() - t0, "note": ""})
            if task == ("induction" if args.quick else "ioi"):  # quick: paths on the induction pairs
                ioi_table = (res.table, pairs)
        if ioi_table is not None and args.receivers > 0:
            table, pairs = ioi_table
            receivers = top_heads(table, args.receivers)
            last = max(l for l, _ in receivers)  # each sender is paired with the receivers after it (path_patch)
            senders = [(l, h) for l in range(last) for h in range(model.card.n_heads)]
            if senders:
                t0 = time.perf_counter()
                p = path_patch(model, pairs[:args.path_pairs], senders, PatchConfig(heads=tuple(receivers), bootstrap=0))
                pt = p.table.copy()
                pt.insert(0, "model", name)
                path_rows.append(pt)
                summary.append({"model": name, "task": f"{tasks[0]}-paths", "pairs": args.path_pairs,
                                "top_heads": " ".join(f"L{l}H{h}" for l, h in receivers),
                                "seconds": time.perf_counter() - t0,
                                "note": f"{len(senders)} senders (layers 0..{last - 1}) into the top {len(receivers)} heads"})
    keys = ("model", "task")
    if heads_rows:
        write_rows(pd.concat(heads_rows, ignore_index=True), args.out / "patch_heads.csv", keys)
    if path_rows:
        write_rows(pd.concat(path_rows, ignore_index=True), args.out / "patch_paths.csv", ("model",))
    df = pd.DataFrame(summary)
    write_rows(df, args.out / "patch_summary.csv", keys)
    print(df.drop(columns=[c for c in ("note",) if c in df]).to_string(index=False))
    return df


if __name__ == "__main__":
    main()
