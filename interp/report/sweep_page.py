"""The sweep report: each measurement against context length, median over heads and for a picked head.

One self-contained HTML file (plotly.js inlined, no requests). Each panel groups related columns of
``sweep.csv`` (paper 001's figures: sink weight and max q.k per query, Fig. 6; stable rank and FSV
ratio, Fig. 4; cone cosines, Figs. 2 and 10; silhouette / Davies-Bouldin, Fig. 11; key norm and
attention received of token 0, Fig. 5). Solid lines: the median over all heads at each length; dashed:
the head chosen in the picker (layer, head). The x axis (log scale, ticks at the scanned lengths) spans
the scanned lengths; a vertical line marks the model's context length when it lies among them.
"""

from __future__ import annotations

import html
from pathlib import Path

import numpy as np
import pandas as pd
from plotly.offline import get_plotlyjs

from interp.io import write_text_atomic
from interp.report import html as html_kit
from interp.experiments.sweep import SweepResult

# (panel title, y-axis title, columns of sweep.csv)
PANELS: list[tuple[str, str, list[str]]] = [
    ("Sink weight with and without RoPE (001 Fig. 6 left)", "attention on token 0 (mean over queries)",
     ["sink_weight", "sink_weight_norope"]),
    ("Maximum q.k per query, mean over queries (001 Fig. 6 right)", "max q.k (raw dot product)", ["max_qk_pre", "max_qk_rot"]),
    ("Stable rank of keys and queries (001 Fig. 4 right, Theorem 1)", "stable rank",
     ["srank_k_pre", "srank_k_rot", "srank_q_pre", "srank_q_rot"]),
    ("First singular value after / before RoPE (001 Fig. 4 middle)", "ratio", ["fsv_ratio_k", "fsv_ratio_q"]),
    ("Mean pairwise cosines (001 Figs. 2, 10)", "cosine",
     ["cos_qk_pre", "cos_qk_rot", "cos_kk_pre", "cos_kk_rot", "cos_qq_pre", "cos_qq_rot"]),
    ("Silhouette score of q vs k clusters (001 Fig. 11 left; lower = more overlap)", "silhouette", ["silhouette_pre", "silhouette_rot"]),
    ("Davies-Bouldin index of q vs k clusters (001 Fig. 11 right; higher = more overlap)", "Davies-Bouldin index",
     ["davies_bouldin_pre", "davies_bouldin_rot"]),
    ("Key norm of token 0 and of the rest (001 Fig. 5 left)", "key norm", ["key_norm_first", "key_norm_rest"]),
    ("Attention received by token 0 / the largest over keys (001 Fig. 5 right)", "received / max over keys",
     ["received_norm_first_pre", "received_norm_first_rot"]),
    ("Slash score at the best lag 0..4 (004)", "slash score", ["slash_score"]),
]


def sweep_data(table: pd.DataFrame) -> dict:
    """What the page embeds: lengths, head labels, per column the median over heads and every head's values per length,
    and the panels ``[title, y-axis title, columns]``."""
    lengths = sorted(table["length"].unique().tolist())
    first = table[table["length"] == lengths[0]]
    heads = [f"L{l}H{h}" for l, h in zip(first["layer"], first["head"])]
    cols = {}
    for _, _, names in PANELS:
        for c in names:
            if c not in table or table[c].isna().all():
                continue
            grid = table.pivot_table(index=["layer", "head"], columns="length", values=c, dropna=False).reindex(columns=lengths)
            vals = grid.to_numpy(dtype=float)
            cols[c] = {"median": [None if np.isnan(v) else float(f"{v:.5g}") for v in np.nanmedian(vals, axis=0)],
                       "heads": [[None if np.isnan(v) else float(f"{v:.5g}") for v in row] for row in vals]}
    return {"lengths": lengths, "heads": heads, "cols": cols, "panels": [[t, y, [c for c in n if c in cols]] for t, y, n in PANELS]}


def render_sweep(sweep: SweepResult) -> str:
    """The sweep report as an HTML string (see module docstring)."""
    first = sweep.results[sweep.lengths[0]]
    card = first.card
    data = sweep_data(sweep.table)
    prompts = first.meta.get("prompts")
    beyond = [n for n in sweep.lengths if n > card.context_length]
    parts = [f"<h1>Length sweep: {html.escape(card.name)}</h1>",
             *([f'<p class="note partial"><b>Partial run: {html.escape(str(sweep.partial))}</b> (interrupted; the tables '
                "hold the finished lengths only; rerun the command with --resume to finish it)</p>"] if sweep.partial else []),
             f'<p class="note">{prompts} prompts ({html.escape(str(first.meta.get("corpus", "?")))}), prefixes of lengths '
             f'{", ".join(map(str, sweep.lengths))}; context length {card.context_length}'
             + (" (dotted line)" if sweep.lengths[0] <= card.context_length <= sweep.lengths[-1] else "")
             + (f"; lengths {', '.join(map(str, beyond))} are beyond it: positions out of distribution" if beyond else "")
             + ". Solid: median over all heads; dashed: the head picked here. Definitions: interp README and "
               "interp.measures.geometry.</p>",
             'head: <select id="sweep-head"></select>']
    parts += [f'<div id="sweep-{k}" class="fig"></div>' for k in range(len(data["panels"]))]
    return (f"<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>interp sweep: {html.escape(card.name)}</title>"
            f"<style>{html_kit.CSS}</style><script>{get_plotlyjs()}</script></head><body>{''.join(parts)}"
            f"<script>{html_kit.fill(html_kit.asset('sweep.js'), DATA=data, CTX=card.context_length)}</script></body></html>")


def write_sweep_report(sweep: SweepResult, path: str | Path) -> Path:
    """Write the self-contained sweep report to ``path`` (parents created; atomically, ``interp.io``). Returns the path."""
    return write_text_atomic(path, render_sweep(sweep))
