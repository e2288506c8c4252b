"""Head atlas of the zoo: every head's role (SDH, sink, previous-token, duplicate-token, induction, echo, streaming,
retrieval), where the roles sit, how they co-occur, their r1 and InP band use, and which RoPE band each role needs.

For each model: ``interp.experiments.atlas.run_atlas`` with ``--prompts`` x ``--tokens`` pydoc tokens for the text
pass and as many repeated-random prompts (BOS, r, r), with the three band ablations of 004 (``ablate``, six planes
per band) and 200 bootstrap resamples of the prompts for each head's role support (``--support``; ``role_support``).
The retrieval scores are joined from the committed ``retrieval_heads_<model>.csv`` (``analyses/atlas/retrieval_heads.py``:
Wu et al.'s needle-in-a-haystack decoding on the same pydoc haystack), not rerun here.

Writes ``atlas_<model>.csv`` (the atlas table), ``atlas_roles.csv`` (per model and role: heads, share, medians of
r1 and active InP planes per band against the other heads, thresholds), ``atlas_cooccurrence.csv`` (model, role x
role), ``atlas_ablation.csv`` (per model and role: median score and per-head ratio without each band),
``atlas_summary.csv`` (per model: heads, count per role, seconds per pass) and ``atlas_grid_<model>.{html,png}``
(the layer x head role grid) and ``atlas_ablation.{html,png}``.

    python -m analyses.atlas.head_atlas [--models ...] [--prompts 8] [--tokens 1024] [--quick] [--out DIR]
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import plotly.graph_objects as go
import torch

import interp
from interp.experiments.atlas import (BANDS, ROLE_NAMES, AtlasConfig, band_attribution, cooccurrence, role_summary,
                                      run_atlas)
from interp.report.atlas_page import role_grid

from analyses._common import FIGURES, installed, parser, save_figure


def retrieval_scores(name: str) -> pd.DataFrame | None:
    """The committed retrieval scores of ``name`` (``figures/retrieval_heads_<name>.csv``) or None."""
    path = FIGURES / f"retrieval_heads_{name}.csv"
    return pd.read_csv(path)[["layer", "head", "retrieval_score"]] if path.exists() else None


def ablation_figure(attr: pd.DataFrame) -> go.Figure:
    fig = go.Figure()
    for band in BANDS:
        fig.add_trace(go.Bar(x=[f"{m}<br>{r}" for m, r in zip(attr["model"], attr["role"])], y=attr[f"ratio_{band}"], name=band))
    fig.add_hline(y=1.0, line_dash="dot")
    fig.update_layout(barmode="group", template="plotly_white", width=1200, height=480, yaxis_title="median ratio ablated / original",
                      title="Which RoPE band each role needs: its score with six planes of a band unrotated (counterfactual, 004 Table 5)")
    return fig


def write_merged(df: pd.DataFrame, path: Path, models: list[str], **to_csv) -> pd.DataFrame:
    """Write ``df`` to ``path``, keeping the rows of other models already there (a run of some models updates theirs)."""
    if path.exists():
        old = pd.read_csv(path)
        cols = list(df.columns) + [c for c in old.columns if c not in df.columns]  # this run's column order
        df = pd.concat([old[~old["model"].isin(models)], df], ignore_index=True)[cols]
    df.to_csv(path, index=False, **to_csv)
    return df


def main(argv: list[str] | None = None) -> pd.DataFrame:
    ap = parser(__doc__, "tiny-llama, 2 prompts x 48 tokens")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=1024)
    ap.add_argument("--support", type=int, default=200, help="bootstrap resamples of the prompts for each head's role support "
                    "(support_<role> in atlas_<model>.csv; quick: 10)")
    args = ap.parse_args(argv)
    n_remove = 6
    if args.quick:
        args.models, args.prompts, args.tokens, n_remove, args.support = ["tiny-llama"], 2, 48, 2, 10
    args.out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    roles, co, attr, summary = [], [], [], []
    for name in installed(args.models):
        model = interp.load_model(name, device="cpu")
        ret = retrieval_scores(name)
        res = run_atlas(model, AtlasConfig(prompts=args.prompts, tokens=args.tokens, ablate=True, n_remove=n_remove,
                                                support=args.support, scan=interp.ScanConfig(counterfactual_queries=0)),
                        retrieval_heads=ret)
        table = res.table
        table.to_csv(args.out / f"atlas_{name}.csv", index=False, float_format="%.6g")
        for df, rows in ((role_summary(table, res.attainable), roles), (cooccurrence(table).reset_index().rename(columns={"index": "role"}), co),
                         (band_attribution(table), attr)):
            df.insert(0, "model", name)
            rows.append(df)
        summary.append({"model": name, "prompts": args.prompts, "tokens": args.tokens, "heads": len(table),
                        "retrieval_joined": ret is not None, **{n: int(table[f"role_{n}"].sum()) for n in ROLE_NAMES},
                        **{f"seconds_{k}": round(v, 1) for k, v in res.seconds.items()}})
        save_figure(role_grid(table).update_layout(title=f"{name}: dominant role of every head"), args.out, f"atlas_grid_{name}")
        print(f"{name}: " + ", ".join(f"{n} {summary[-1][n]}" for n in ROLE_NAMES) + f"; {res.seconds}", flush=True)
    ran = [s["model"] for s in summary]
    write_merged(pd.concat(roles), args.out / "atlas_roles.csv", ran, float_format="%.6g")
    write_merged(pd.concat(co), args.out / "atlas_cooccurrence.csv", ran)
    a = write_merged(pd.concat(attr), args.out / "atlas_ablation.csv", ran, float_format="%.6g")
    if len(a):
        save_figure(ablation_figure(a), args.out, "atlas_ablation")
    return write_merged(pd.DataFrame(summary), args.out / "atlas_summary.csv", ran)


if __name__ == "__main__":
    main()
