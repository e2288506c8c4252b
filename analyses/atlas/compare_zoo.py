"""The three zoo models side by side (issue 12's comparison figure): SDHs by lag and distributions over heads.

Scans each model (8 pydoc prompts x 1024 tokens) or loads saved scans (``--load MODEL=DIR``, a folder written by
``interp scan``), then writes ``figures/compare_zoo.csv`` (one row per model, layer, head),
``figures/compare_zoo_summary.csv`` (one row per model) and the figures ``compare_zoo_lags`` and
``compare_zoo_box`` (``interp.report.compare``; ``interp compare`` writes the interactive page), and the 004 Figs. 5 / 6
analogue ``sdh_vs_all_fig5_6`` (mean r1, R_0.95 and norm relative variation of q and k, SDHs against all heads;
``figures/sdh_vs_all_fig5_6.csv``).

    python -m analyses.atlas.compare_zoo [--models ...] [--load smollm2-135m=DIR ...] [--quick]
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

import interp
from interp.report.compare import box_figure, compare_table, sdh_lag_figure, summary

from analyses._common import parser, save_figure


FIG56 = ["r1_q", "r1_k", "R95_q", "R95_k", "norm_rv_q", "norm_rv_k"]


def sdh_vs_all(table: pd.DataFrame) -> pd.DataFrame:
    """Per model and group (SDHs, all heads): the means of 004 Fig. 5 (r1, R_0.95) and Fig. 6 (norm relative variation)."""
    rows = []
    for m, t in table.groupby("model", sort=False):
        for group, part in (("SDHs", t[t["is_sdh"]]), ("all heads", t)):
            rows.append({"model": m, "group": group, "heads": len(part), **{c: part[c].mean() for c in FIG56}})
    return pd.DataFrame(rows)


def sdh_vs_all_figure(df: pd.DataFrame):
    """Grouped bars, one panel per measurement: SDHs vs all heads for each model (004 Figs. 5, 6)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=len(FIG56), subplot_titles=FIG56)
    for k, c in enumerate(FIG56):
        for group, color in (("SDHs", "#d62728"), ("all heads", "#1f77b4")):
            d = df[df["group"] == group]
            fig.add_trace(go.Bar(x=d["model"], y=d[c], name=group, marker_color=color, showlegend=k == 0), 1, k + 1)
    fig.update_layout(barmode="group", height=420, width=1400, title="SDHs against all heads (004 Fig. 5: r1, R_0.95; Fig. 6: norm variation)")
    return fig


def main(argv: list[str] | None = None) -> pd.DataFrame:
    ap = parser(__doc__, "tiny-llama and tiny-qwen2, 2 prompts x 64 tokens")
    ap.add_argument("--load", nargs="*", default=[], help="MODEL=DIR: a saved scan (its DIR/state) instead of scanning")
    args = ap.parse_args(argv)
    loads = dict(x.split("=", 1) for x in args.load)
    models = ["tiny-llama", "tiny-qwen2"] if args.quick else [m for m in args.models if m in loads or interp.models.is_installed(m)]
    n, t = (2, 64) if args.quick else (8, 1024)
    results = []
    for name in models:
        if name in loads:
            results.append(interp.ScanResult.load(Path(loads[name]) / "state"))
            continue
        model = interp.load_model(name, device="cpu")
        results.append(interp.scan(model, interp.corpus.prompts(model, "random" if args.quick else "pydoc", n, t),
                                   interp.ScanConfig(counterfactual_queries=0)))  # the exact pre-RoPE sink weight (001)
    table = compare_table(results, models)
    s = summary(table)
    args.out.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.out / "compare_zoo.csv", index=False)
    s.to_csv(args.out / "compare_zoo_summary.csv", index=False)
    save_figure(sdh_lag_figure(s), args.out, "compare_zoo_lags")
    save_figure(box_figure(table), args.out, "compare_zoo_box")
    fig56 = sdh_vs_all(table)
    fig56.to_csv(args.out / "sdh_vs_all_fig5_6.csv", index=False)
    save_figure(sdh_vs_all_figure(fig56), args.out, "sdh_vs_all_fig5_6")
    print(fig56.round(3).to_string(index=False))
    print(s.to_string(index=False))
    return s


if __name__ == "__main__":
    main()
