"""Paper 001's geometry against context length for the zoo models (001 Figs. 2, 4, 5, 6, 11 analogues).

For each model, a length sweep (``interp.experiments.sweep``: the same pydoc prompts' prefixes, geometry on) or a
saved one (``--load MODEL=DIR``, e.g. the output of ``interp sweep``), then one figure with six panels,
each the median over heads (band: 25-75% of heads) against length, pre and post RoPE:
mean pairwise q-k cosine (Fig. 2 / 10), stable rank of keys (Fig. 4 right), FSV ratio of keys (Fig. 4
middle), sink weight with / without RoPE (Fig. 6 left), max q.k per query (Fig. 6 right), silhouette
score (Fig. 11); and a second figure at the longest length: key norm by position and the normalised
attention received by position (Fig. 5), median over heads. Writes ``figures/frayed_rope_<model>.{html,png}``,
``figures/frayed_rope_fig5_<model>.{html,png}`` and ``figures/frayed_rope_summary.csv`` (median per
model, length and measurement; also Davies-Bouldin and key norms, ``EXTRA``).

    python -m analyses.p001_frayed.frayed_rope [--models ...] [--lengths 512,1024,...] [--prompts 2] [--load smollm2-135m=DIR] [--quick]

The committed table (``figures/provenance.json`` has the exact command): SmolLM2 from the saved sweep of
``interp sweep smollm2-135m --lengths 512,1024,2048,4096,8192,16384 --prompts 2 --beyond-context --cluster-points 1000
--out out/sweep`` (2x its context; 500 + 500 points for the cluster scores, as this script's sweeps), Gemma-3 and
Qwen2.5 swept by this script at ``--lengths 512,1024,2048,4096`` (inside their 32k contexts; CPU time):

    python -m analyses.p001_frayed.frayed_rope --load smollm2-135m=out/sweep --lengths 512,1024,2048,4096
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

import interp
from interp.experiments.sweep import SweepResult, sweep
from interp.measures import geometry

from analyses._common import parser, save_figure
from analyses.p001_frayed._loop import model_runs

PANELS = [("mean q-k cosine (Fig. 2)", ["cos_qk_pre", "cos_qk_rot"]), ("key stable rank (Fig. 4 right)", ["srank_k_pre", "srank_k_rot"]),
          ("key FSV after / before RoPE (Fig. 4 middle)", ["fsv_ratio_k"]), ("sink weight (Fig. 6 left)", ["sink_weight_norope", "sink_weight"]),
          ("max q.k per query (Fig. 6 right)", ["max_qk_pre", "max_qk_rot"]), ("silhouette q vs k (Fig. 11)", ["silhouette_pre", "silhouette_rot"])]
COLORS = {"pre": "#1f77b4", "rot": "#d62728", "norope": "#1f77b4"}


def _color(col: str) -> str:
    return COLORS["pre"] if col.endswith(("_pre", "_norope")) else COLORS["rot"]


# summarised beside the plotted columns (the Davies-Bouldin and key-norm rows of docs/results/paper-001.md)
EXTRA = ["davies_bouldin_pre", "davies_bouldin_rot", "key_norm_first", "key_norm_rest"]


def summary(table: pd.DataFrame, model: str) -> pd.DataFrame:
    """Median and quartiles over heads per length of every plotted column and of ``EXTRA`` (tidy)."""
    cols = [c for _, cs in PANELS for c in cs] + [c for c in EXTRA if c in table.columns]
    g = table.groupby("length")[cols]
    out = []
    for q, name in ((0.5, "median"), (0.25, "q25"), (0.75, "q75")):
        out.append(g.quantile(q).reset_index().melt(id_vars="length", var_name="measure", value_name=name))
    df = out[0].merge(out[1]).merge(out[2])
    return df.assign(model=model)[["model", "length", "measure", "median", "q25", "q75"]]


def length_figure(s: pd.DataFrame, model: str, context: int) -> go.Figure:
    fig = make_subplots(rows=2, cols=3, subplot_titles=[t for t, _ in PANELS])
    for k, (_, cols) in enumerate(PANELS):
        r, c = k // 3 + 1, k % 3 + 1
        for col in cols:
            d = s[s.measure == col].sort_values("length")
            fig.add_trace(go.Scatter(x=d.length, y=d.q75, mode="lines", line=dict(width=0), showlegend=False, hoverinfo="skip"), r, c)
            fig.add_trace(go.Scatter(x=d.length, y=d.q25, mode="lines", fill="tonexty", line=dict(width=0), fillcolor="rgba(0,0,0,0.08)",
                                     showlegend=False, hoverinfo="skip"), r, c)
            fig.add_trace(go.Scatter(x=d.length, y=d["median"], name=col, mode="lines+markers", line=dict(color=_color(col))), r, c)
        fig.add_vline(x=context, line_dash="dot", line_color="#888", row=r, col=c)
        fig.update_xaxes(type="log", row=r, col=c)
    fig.update_layout(title=f"{model}: geometry against context length (median over heads, band 25-75%; dotted: context)",
                      height=650, width=1200)
    return fig


def position_figure(result: interp.ScanResult, model: str) -> go.Figure:
    cur = geometry.position_curves(result)
    n = max(result.meta["tokens"])
    pos = np.arange(n)
    kn = cur["key_norm"][..., :n].reshape(-1, n).median(0).values.numpy()
    fig = make_subplots(rows=1, cols=2, subplot_titles=["key L2 norm by position (Fig. 5 left)",
                                                        "attention received / the largest over keys (Fig. 5 right)"])
    fig.add_trace(go.Scatter(x=pos + 1, y=kn, name="key norm", line=dict(color="#444")), 1, 1)
    for tag in ("pre", "rot"):
        rec = cur[f"received_norm_{tag}"][..., :n].reshape(-1, n).median(0).values.numpy()
        fig.add_trace(go.Scatter(x=pos + 1, y=rec, name=f"received ({tag})", line=dict(color=COLORS[tag])), 1, 2)
    fig.update_xaxes(type="log", title="position + 1")
    fig.update_layout(title=f"{model} at {n} tokens (median over heads)", height=380, width=1100)
    return fig


def main(argv: list[str] | None = None) -> pd.DataFrame:
    ap = parser(__doc__, "tiny-llama at 64, 128 tokens")
    ap.add_argument("--lengths", default="512,1024,2048,4096,8192")
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--load", nargs="*", default=[], help="MODEL=DIR: use a saved sweep instead of running one")
    args = ap.parse_args(argv)
    loads = dict(x.split("=", 1) for x in args.load)
    lengths = [64, 128] if args.quick else [int(x) for x in args.lengths.split(",")]
    args.out.mkdir(parents=True, exist_ok=True)
    frames = []
    for run in model_runs(args, args.prompts, max(lengths), saved=loads):
        name = run.name
        if run.model is None:
            res = SweepResult.load(loads[name])
        else:
            cfg = interp.ScanConfig(geometry=True, cluster_points=100 if args.quick else 1000, counterfactual_queries=0)
            res = sweep(run.model, run.prompts, lengths, cfg, beyond_context=True, progress=not args.quick)
        card = res.results[res.lengths[0]].card
        s = summary(res.table, name)
        frames.append(s)
        save_figure(length_figure(s, name, card.context_length), args.out, f"frayed_rope_{name}")
        save_figure(position_figure(res.results[res.lengths[-1]], name), args.out, f"frayed_rope_fig5_{name}")
        print(f"{name}: lengths {res.lengths} in {run.seconds():.0f} s", flush=True)
    df = pd.concat(frames, ignore_index=True)
    df.to_csv(args.out / "frayed_rope_summary.csv", index=False)
    return df


if __name__ == "__main__":
    main()
