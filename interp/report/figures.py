"""Plotly figures of a scan: layer x head heatmaps, top-SDH attention maps, slash spectra, sinks."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

# Columns shown as layer x head heatmaps, with a human label each.
def heatmap_metrics() -> dict[str, str]:
    """``{column: label}`` the heatmap menu offers: every registered measure's heatmap columns (``interp.measures``),
    then the OOD join's (``interp.measures.slash.OOD_COLUMNS``); ``slash_score`` first, as the page opens on it."""
    from interp.measures import REGISTRY
    from interp.measures.slash import OOD_COLUMNS

    every = REGISTRY.column_labels()
    labels = {c: every[c] for c in REGISTRY.heatmap_columns()}
    labels.update({c.name: c.label for c in OOD_COLUMNS if c.heatmap})
    first = {k: labels.pop(k) for k in ("slash_score",) if k in labels}
    return {**first, **labels}


def _grid(heads: pd.DataFrame, col: str) -> np.ndarray:
    return heads.pivot(index="layer", columns="head", values=col).to_numpy(dtype=float)


def metric_heatmaps(heads: pd.DataFrame) -> go.Figure:
    """One layer x head heatmap with a dropdown over every measurement of ``heatmap_metrics()``."""
    labels = heatmap_metrics()
    metrics = [m for m in labels if m in heads and heads[m].notna().any()]
    fig = go.Figure()
    for i, m in enumerate(metrics):
        fig.add_trace(go.Heatmap(z=_grid(heads, m), colorscale="Viridis", visible=i == 0, name=m,
                                 hovertemplate="layer %{y} head %{x}<br>" + m + " = %{z:.4g}<extra></extra>"))
    buttons = [dict(label=m, method="update",
                    args=[{"visible": [j == i for j in range(len(metrics))]}, {"title.text": labels[m]}])
               for i, m in enumerate(metrics)]
    fig.update_layout(updatemenus=[dict(buttons=buttons, x=1.0, y=1.18, xanchor="right", yanchor="bottom", showactive=True)],
                      title=dict(text=labels[metrics[0]], x=0.02, y=0.98), xaxis_title="head", yaxis_title="layer",
                      height=max(420, 18 * heads["layer"].nunique() + 160), margin=dict(t=110))
    # integer ticks only: every head, every layer (every other layer past 32)
    fig.update_xaxes(tick0=0, dtick=1 if heads["head"].nunique() <= 32 else 2)
    fig.update_yaxes(tick0=0, dtick=1 if heads["layer"].nunique() <= 32 else 2)
    return fig


def sdh_maps(maps: np.ndarray, top: pd.DataFrame, tokens: list[str] | None = None) -> go.Figure:
    """Average attention maps ``[layer, head, M, M]`` of the given heads (rows of ``top``)."""
    n = len(top)
    cols = min(3, max(n, 1))
    rows = max(1, -(-n // cols))
    titles = [f"L{r.layer}H{r.head}: mean attention {r.slash_score:.3f} at lag {int(r.slash_delta)}" for r in top.itertuples()]
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=titles or None)
    for i, r in enumerate(top.itertuples()):
        m = maps[r.layer, r.head]
        fig.add_trace(go.Heatmap(z=m, coloraxis="coloraxis", hovertemplate="query %{y} key %{x}: %{z:.3f}<extra></extra>"),
                      row=i // cols + 1, col=i % cols + 1)
    fig.update_yaxes(autorange="reversed")
    fig.update_layout(coloraxis=dict(colorscale="Blues", cmin=0, cmax=float(min(1.0, np.nanmax(maps) if maps.size else 1))),
                      height=330 * rows, title="Average attention over the first positions (rows: queries, columns: keys)")
    return fig


def slash_spectrum(deltas: np.ndarray, scores: np.ndarray, label: str, kappa: float | None = None) -> go.Figure:
    """Average slash score vs lag for one or more heads (``scores`` ``[n_heads, delta]``)."""
    fig = go.Figure()
    for row, name in zip(np.atleast_2d(scores), [label] if np.ndim(scores) == 1 else label):
        fig.add_trace(go.Scatter(x=deltas, y=row, mode="lines", name=name))
    if kappa is not None:
        fig.add_hline(y=kappa, line_dash="dot", annotation_text=f"slash-dominant at {kappa:g} (kappa)")
    fig.update_layout(xaxis_title="lag: query i to key i - lag", yaxis_title="mean attention at the lag (slash score)",
                      yaxis_type="log", height=380)
    return fig


def sink_scatter(heads: pd.DataFrame) -> go.Figure:
    """Sink weight with RoPE vs the pre-RoPE counterfactual, one point per head."""
    fig = go.Figure(go.Scatter(
        x=heads["sink_weight_norope"], y=heads["sink_weight"], mode="markers",
        text=[f"L{l}H{h}" for l, h in zip(heads["layer"], heads["head"])], marker=dict(color=heads["layer"], colorscale="Viridis", showscale=True, colorbar=dict(title="layer")),
        hovertemplate="%{text}<br>no RoPE %{x:.3f}<br>RoPE %{y:.3f}<extra></extra>"))
    fig.add_shape(type="line", x0=0, y0=0, x1=1, y1=1, line=dict(dash="dot", color="grey"))
    fig.update_layout(xaxis_title="sink weight, pre-RoPE counterfactual", yaxis_title="sink weight with RoPE", height=420,
                      title="Attention on token 0 per head")
    return fig


def band_ratio_box(table: pd.DataFrame, title: str = "Slash score with a band of planes unrotated / original (004 Fig. 8)") -> go.Figure:
    """Box plot of ablated / original slash score per variant (columns ``ratio_<variant>`` of a band-ablation table)."""
    fig = go.Figure()
    for c in [c for c in table.columns if c.startswith("ratio_")]:
        fig.add_trace(go.Box(y=table[c], name=c[len("ratio_"):], boxpoints="all", jitter=0.4, pointpos=0,
                             text=[f"L{l}H{h} lag {d}" for l, h, d in zip(table["layer"], table["head"], table["delta"])],
                             hovertemplate="%{text}: %{y:.3f}<extra></extra>"))
    fig.add_hline(y=1.0, line_dash="dot", line_color="grey")
    fig.update_layout(title=title, yaxis_title="ablated / original slash score", showlegend=False, height=420)
    return fig


def plane_heatmap(z: np.ndarray, labels: list[str], title: str) -> go.Figure:
    """Heads x rotation planes heatmap (``z`` ``[head, freq]``, e.g. mean |InP| / its maximum per head)."""
    fig = go.Figure(go.Heatmap(z=z, y=labels, x=list(range(z.shape[1])), colorscale="Blues", zmin=0, zmax=1,
                               hovertemplate="%{y} plane %{x}: %{z:.3f}<extra></extra>"))
    fig.update_layout(title=title, xaxis_title="plane (0 = highest frequency)", yaxis=dict(autorange="reversed", type="category"),
                      height=max(300, 16 * len(labels) + 140))
    return fig


def inp_heatmap(inp: np.ndarray, query: int, title: str = "") -> go.Figure:
    """Paper 004 Fig. 7: InP(query, j, l) as keys (rows) x rotation planes (columns), diverging around 0.

    Args:
        inp: ``[k_pos, freq]`` InP of one head and query (``interp.measures.inp.inp_matrix`` for one prompt, or
            ``ScanResult.inp_query_map()[layer, head]`` for the mean over a scan's prompts).
        query: the query position i (for the title).
    """
    z = np.asarray(inp, dtype=float)
    fig = go.Figure(go.Heatmap(z=z, colorscale="RdBu", zmid=0, colorbar=dict(title="InP"),
                               hovertemplate="key %{y} plane %{x}: %{z:.3f}<extra></extra>"))
    fig.update_layout(title=title or f"InP(i = {query}, j, l): keys x planes (paper 004 Fig. 7)", height=520,
                      xaxis_title="plane (0 = highest frequency)", yaxis=dict(title="key position j", autorange="reversed"))
    return fig
