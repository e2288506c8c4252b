"""Plotly views of the PCA snapshot (paper 001 Fig. 3) and the layer-0 embedding cone (paper 004 Figs. 12, 13).

They read results only: ``interp.experiments.projection.PcaSnapshot`` and ``interp.experiments.embedding_cone.embedding_cone_table``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.colors import qualitative
from plotly.subplots import make_subplots

from interp.experiments.projection import PcaSnapshot

__all__ = ["pca_snapshot_figure", "embedding_cone_figure"]


def _sample(n: int, max_points: int, rng: np.random.Generator) -> np.ndarray:
    return np.arange(n) if n <= max_points else np.sort(rng.choice(n, max_points, replace=False))


def pca_snapshot_figure(snap: PcaSnapshot, max_points: int = 1500, seed: int = 0, title: str = "") -> go.Figure:
    """Scatter panels of a PCA snapshot (paper 001, Fig. 3): one per view, keys and each query head coloured apart.

    Panels in ``snap.panels`` order (pre-RoPE short, post-RoPE short, pre-RoPE long, post-RoPE long), all on the
    plane fitted to the pre-RoPE short points; each titled with its stable ranks (keys, queries; full d_head
    space). The origin is marked with a cross. At most ``max_points`` points per cloud are drawn (a seeded
    uniform subsample; the stable ranks use every point). Axes: coordinates on the two fitted components
    (units of the model's query/key vectors), shared across panels so that spread is comparable.
    """
    rng = np.random.default_rng(seed)
    titles = [f"{p.label}<br>srank K {p.srank_k:.2f}, Q {p.srank_q:.2f}" for p in snap.panels]
    fig = make_subplots(rows=1, cols=len(snap.panels), subplot_titles=titles, shared_xaxes=True, shared_yaxes=True,
                        horizontal_spacing=0.03)
    for j, p in enumerate(snap.panels, start=1):
        idx = _sample(len(p.keys), max_points, rng)
        fig.add_trace(go.Scattergl(x=p.keys[idx, 0], y=p.keys[idx, 1], mode="markers", name=f"keys (kv head {snap.kv_head})",
                                   legendgroup="k", showlegend=j == 1, marker=dict(size=3, color="black", opacity=0.5)), row=1, col=j)
        for i, h in enumerate(snap.heads):
            sel = np.flatnonzero(p.query_head == h)
            sel = sel[_sample(len(sel), max_points, rng)]
            fig.add_trace(go.Scattergl(x=p.queries[sel, 0], y=p.queries[sel, 1], mode="markers", name=f"queries, head {h}",
                                       legendgroup=f"q{h}", showlegend=j == 1,
                                       marker=dict(size=3, color=qualitative.D3[(i + 1) % 10], opacity=0.4)), row=1, col=j)
        fig.add_trace(go.Scatter(x=[0], y=[0], mode="markers", marker=dict(symbol="x", size=9, color="red"), name="origin",
                                 legendgroup="o", showlegend=j == 1), row=1, col=j)
        fig.update_xaxes(title_text="PC1 (uncentred)", row=1, col=j)
    fig.update_yaxes(title_text="PC2 (uncentred)", row=1, col=1)
    fig.update_layout(title=title or f"PCA snapshot, layer {snap.layer}, kv head {snap.kv_head} (fitted pre-RoPE, n = {snap.fit_n})",
                      height=430, width=330 * len(snap.panels) + 150, template="plotly_white")
    return fig


def embedding_cone_figure(table: pd.DataFrame, title: str = "") -> go.Figure:
    """Paper 004 Figs. 12 and 13 from ``embedding_cone_table`` rows of one or more models (column ``model``).

    Left: mean over the rows (heads) of ``RV(v_Q)``, ``RV(v_K)`` and the random-direction baseline ``RV(v_rand)``
    (one draw, as the paper; and the median over the table's draws, ``rv_rand_median``); percent, log axis, per
    model (Fig. 12). Right, for models with q/k biases: mean over rows of
    ``||W_Q^T h||``, ``||b_Q||``, ``||W_K^T h||``, ``||b_K||`` (Fig. 13; key rows repeat per query head of a group,
    as in the paper's per-SDH averages). Filter the rows (e.g. to layer-0 SDHs) before calling.
    """
    biased = [m for m, g in table.groupby("model", sort=False) if g["bias_k"].notna().any() or g["bias_q"].notna().any()]
    cols = 2 if biased else 1
    fig = make_subplots(rows=1, cols=cols, subplot_titles=["relative variation RV (004 Fig. 12)", "norms vs biases (004 Fig. 13)"][:cols])
    models = list(dict.fromkeys(table["model"]))
    ys = []
    for i, (col, name) in enumerate((("rv_q", "RV(v_Q)"), ("rv_k", "RV(v_K)"), ("rv_rand", "RV(v_rand)"),
                                     ("rv_rand_median", "RV(v_rand), median of draws"))):
        y = [100 * table.loc[table["model"] == m, col].mean() for m in models]
        ys += y
        fig.add_trace(go.Bar(x=models, y=y, name=name, marker_color=qualitative.D3[i], text=[f"{v:.0f}%" for v in y],
                             textposition="outside"), row=1, col=1)
    finite = [v for v in ys if np.isfinite(v) and v > 0]
    rng = [np.log10(min(finite) / 3), np.log10(max(finite) * 3)] if finite else None
    fig.update_yaxes(type="log", range=rng, title_text="RV (%)", row=1, col=1)
    if biased:
        for i, (col, name) in enumerate((("mean_wq_h", "mean ||W_Q^T h||"), ("bias_q", "||b_Q||"),
                                         ("mean_wk_h", "mean ||W_K^T h||"), ("bias_k", "||b_K||"))):
            y = [table.loc[table["model"] == m, col].mean() for m in biased]
            fig.add_trace(go.Bar(x=biased, y=y, name=name, marker_color=qualitative.D3[4 + i], text=[f"{v:.1f}" for v in y],
                                 textposition="outside"), row=1, col=2)
        fig.update_yaxes(title_text="norm", row=1, col=2)
    fig.update_layout(barmode="group", title=title or "Layer-0 embedding cone", height=450, width=500 * cols + 150,
                      template="plotly_white")
    return fig
