"""Several scans side by side (``interp compare``): one tidy table and one self-contained HTML page.

``compare_table(results)`` stacks the head tables with a ``model`` column (``compare.csv``). The page
(``render_compare``) shows, per model: SDH counts by lag (004 Def. 3.1, lags 0..4), the distributions
of r1 of pre-RoPE queries and keys (004 eq. 7), the sink rate (share of heads with sink weight above
0.3) and the cone cosines (001 Fig. 2) as box plots over heads, the top SDHs of each model, and a
scatter of any two measurements across models (two selectors; the page redraws it in the browser).
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Sequence

import pandas as pd
import plotly.graph_objects as go
from plotly.offline import get_plotlyjs
from plotly.subplots import make_subplots

from interp.io import write_text_atomic
from interp.report.bundle import write_csv
from interp.measures import REGISTRY
from interp.report import html as html_kit
from interp.engine import ScanResult

BOX_COLUMNS = REGISTRY.compare_columns()  # the measures' columns marked compare=True (interp.measures)


def box_columns(table: pd.DataFrame) -> list[str]:
    """The ``compare`` columns the scans have (optional measures' columns only where they were switched on)."""
    return [c for c in BOX_COLUMNS if c in table and table[c].notna().any()]
TOP_COLUMNS = ["model", "layer", "head", "slash_delta", "slash_score", "r1_q", "r1_k", "sink_weight"]


def compare_table(results: Sequence[ScanResult], names: Sequence[str] | None = None) -> pd.DataFrame:
    """``model`` plus every head-table column, one row per (model, layer, head).

    Raises:
        ValueError: no results, names not one per result, or two results with the same name (pass ``names``).
    """
    if not results:
        raise ValueError("compare needs at least one scan")
    names = list(names) if names is not None else [r.card.name for r in results]
    if len(names) != len(results):
        raise ValueError(f"{len(names)} names for {len(results)} scans; pass one name per scan (names=, interp compare --names)")
    if len(set(names)) != len(names):
        raise ValueError(f"two scans have the same name ({', '.join(names)}); pass distinct names "
                         f"(names=[...], interp compare --names a,b)")
    frames = [r.heads.assign(model=n) for r, n in zip(results, names)]
    return pd.concat([f[["model", *[c for c in f.columns if c != "model"]]] for f in frames], ignore_index=True)


def summary(table: pd.DataFrame, lags: Sequence[int] = (0, 1, 2, 3, 4)) -> pd.DataFrame:
    """Per model: heads, SDHs and SDHs at each lag, the sink rates (``sink_rate``: share of heads with ``has_sink``;
    ``sink_rate_gu``: mean ``sink_prompt_frac``, Gu et al. 2024), medians of the ``compare`` columns (r1, sink weight,
    cone cosines)."""
    g = table.groupby("model", sort=False)
    out = pd.DataFrame({"heads": g.size(), "sdh": g["is_sdh"].sum()})
    for d in lags:
        out[f"sdh_lag{d}"] = table[table["is_sdh"] & (table["slash_delta"] == d)].groupby("model", sort=False).size()
    out["sink_rate"] = g["has_sink"].mean()  # heads whose importance of token 0, averaged over prompts, > sink_eps
    for c in box_columns(table):
        out[f"median_{c}"] = g[c].median()
    out = out.fillna(0)
    if "sink_prompt_frac" in table:  # Gu et al.'s rate: thresholded per prompt, then averaged (NaN for older scans)
        out.insert(out.columns.get_loc("sink_rate") + 1, "sink_rate_gu", g["sink_prompt_frac"].mean())
    return out.reset_index()


# legends above the plot, in rows: full scan names whatever their length, and no plot wider than the page
_LEGEND = dict(orientation="h", yanchor="bottom", y=1.08, xanchor="left", x=0)
# the page is at most 1200 px wide (interp.report.html.CSS); wide tables scroll inside their box instead of widening it
_COMPARE_CSS = ".wide{max-width:100%;overflow-x:auto} .fig{max-width:100%}"


def sdh_lag_figure(s: pd.DataFrame, lags: Sequence[int] = (0, 1, 2, 3, 4)) -> go.Figure:
    """Grouped bars: SDH count at each lag 0..4, one bar group per lag, one colour per model."""
    fig = go.Figure([go.Bar(x=[f"lag {d}" for d in lags], y=[row[f"sdh_lag{d}"] for d in lags], name=row["model"])
                     for _, row in s.iterrows()])
    fig.update_layout(barmode="group", title="Slash-dominant heads by lag (score >= 0.1)", yaxis_title="heads", height=380,
                      legend=_LEGEND)
    return fig


def box_figure(table: pd.DataFrame, columns: Sequence[str] | None = None) -> go.Figure:
    """One box plot per measurement (default: ``box_columns(table)``), one box per model (points: heads)."""
    columns = box_columns(table) if columns is None else list(columns)
    fig = make_subplots(rows=1, cols=len(columns), subplot_titles=list(columns))
    models = list(dict.fromkeys(table["model"]))
    colors = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]
    for k, c in enumerate(columns):
        for j, m in enumerate(models):
            fig.add_trace(go.Box(y=table.loc[table["model"] == m, c], name=m, marker_color=colors[j % len(colors)],
                                 showlegend=k == 0, boxpoints=False), 1, k + 1)
    fig.update_xaxes(showticklabels=False)
    fig.update_layout(title="Distributions over heads", height=440, legend=_LEGEND)  # width: the page's (responsive)
    return fig


def render_compare(table: pd.DataFrame, top: int = 8) -> str:
    """The comparison page as an HTML string (see module docstring)."""
    s = summary(table)
    numeric = [c for c in table.columns if c not in ("model", "layer", "head", "kv_head") and pd.api.types.is_numeric_dtype(table[c])
               and table[c].notna().any()]
    rows = table[["model", "layer", "head", *numeric]].copy()
    for c in numeric:
        rows[c] = rows[c].astype(float).round(6)
    records = rows.to_json(orient="records")  # NaN -> null
    models = list(dict.fromkeys(table["model"]))
    tops = [table[(table["model"] == m) & table["is_sdh"]].sort_values("slash_score", ascending=False).head(top)[TOP_COLUMNS]
            for m in models]
    parts = [f"<h1>Model comparison: {html.escape(', '.join(models))}</h1>",
             '<p class="note">Each scan as written by interp scan (definitions: interp README, "Measurements"). '
             "The table below has one row per model; compare.csv has one row per (model, layer, head).</p>",
             "<h2>Summary</h2>", f'<div class="wide">{html_kit.table(s)}</div>', "<h2>Slash-dominant heads by lag</h2>", html_kit.figure(sdh_lag_figure(s), "cmp-lags"),
             "<h2>Distributions of near-rank-one-ness (r1), sink weight and query-key cone cosines</h2>", html_kit.figure(box_figure(table), "cmp-box"),
             "<h2>Any two measurements</h2>", 'x: <select id="cmp-x"></select> y: <select id="cmp-y"></select>',
             '<div id="cmp-scatter" class="fig"></div>', f"<h2>Top {top} SDHs of each model</h2>"]
    parts += [f'<div class="wide">{html_kit.table(t)}</div>' for t in tops]
    return (f"<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>interp compare</title><style>{html_kit.CSS}{_COMPARE_CSS}</style>"
            f"<script>{get_plotlyjs()}</script></head><body>{''.join(parts)}"
            f"<script>{html_kit.fill(html_kit.asset('compare.js'), RECORDS=records, COLS=numeric, MODELS=models)}"
            f"</script></body></html>")


def write_compare(results: Sequence[ScanResult], out: str | Path, names: Sequence[str] | None = None) -> pd.DataFrame:
    """Write ``compare.csv`` and ``compare.html`` into folder ``out``; returns the table."""
    d = Path(out)
    d.mkdir(parents=True, exist_ok=True)
    table = compare_table(results, names)
    write_csv(table, d / "compare.csv")
    write_text_atomic(d / "compare.html", render_compare(table))
    return table
