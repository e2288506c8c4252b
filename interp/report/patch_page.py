"""The patching page (``patch.html``): a layer x head grid of ``recovered`` (per position with ``--positions each``: a
head x position grid; with ``--paths``: a sender x receiver grid per receiver input), hover with ``ld``, the bootstrap
interval and, where given, the head's atlas roles and its effects (``interp effects``' dnll per intervention); the
clean and corrupt metric and the settings above. One self-contained HTML file (plotly.js inlined). Definitions:
``interp.experiments.patching``.
"""

from __future__ import annotations

import html
import json
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.offline import get_plotlyjs

from interp.experiments.patching import PatchResult
from interp.io import write_atomic, write_text_atomic
from interp.report import html as html_kit
from interp.report.effects_page import atlas_roles

_COLOUR = dict(colorscale="RdBu_r", zmid=0, xgap=1, ygap=1, hoverinfo="text")


def effect_notes(effects: pd.DataFrame | None) -> dict[tuple[int, int], str] | None:
    """``{(layer, head): "zero 0.12, mean 0.05"}`` (dnll, nats) from an ``effects.csv`` table, else None."""
    if effects is None or not {"layer", "head", "intervention", "dnll"} <= set(effects.columns):
        return None
    out: dict[tuple[int, int], list[str]] = {}
    for r in effects.itertuples(index=False):
        out.setdefault((int(r.layer), int(r.head)), []).append(f"{r.intervention} {html_kit.fmt(r.dnll)}")
    return {k: ", ".join(v) for k, v in out.items()}


def _hover(r, extra: dict[str, dict | None], what: str) -> str:
    text = (f"<b>L{r.layer}H{r.head}</b>{what}<br>ld = {html_kit.fmt(r.ld)}<br>recovered = {html_kit.fmt(r.recovered)} "
            f"[{html_kit.fmt(r.recovered_lo)}, {html_kit.fmt(r.recovered_hi)}]")
    for name, notes in extra.items():
        if notes is not None:
            text += f"<br>{name}: {html.escape(notes.get((int(r.layer), int(r.head)), 'none'))}"
    return text


def _heatmap(z: np.ndarray, text: np.ndarray, x, y, title: str, xtitle: str, ytitle: str) -> go.Figure:
    lim = max(1.0, float(np.nanmax(np.abs(z)))) if np.isfinite(z).any() else 1.0
    fig = go.Figure(go.Heatmap(z=z, x=x, y=y, zmin=-lim, zmax=lim, text=text, colorbar=dict(title="recovered"), **_COLOUR))
    fig.update_layout(title=title, xaxis_title=xtitle, yaxis_title=ytitle, height=max(380, 18 * len(y) + 160))
    return fig


def recovered_grid(table: pd.DataFrame, roles: dict | None = None, effects: dict | None = None,
                   n_layers: int | None = None, n_heads: int | None = None) -> go.Figure:
    """Layer x head heatmap of ``recovered`` (diverging, centred on 0; heads not patched are blank)."""
    L = n_layers or int(table["layer"].max()) + 1
    H = n_heads or int(table["head"].max()) + 1
    z = np.full((L, H), np.nan)
    text = np.full((L, H), "", dtype=object)
    for r in table.itertuples(index=False):
        z[r.layer, r.head] = r.recovered
        text[r.layer, r.head] = _hover(r, {"roles": roles, "effects (dnll)": effects}, "")
    direction = table["direction"].iloc[0] if len(table) else ""
    return _heatmap(z, text, list(range(H)), list(range(L)), f"{direction}: share of the clean-corrupt gap recovered per head",
                    "head", "layer")


def position_grid(table: pd.DataFrame, labels: list[str] | None = None) -> go.Figure:
    """Head x position heatmap of ``recovered`` (``--positions each``); ``labels``: the positions' tokens."""
    keys = list(dict.fromkeys(zip(table["layer"], table["head"])))
    N = int(table["pos"].max()) + 1
    row = {k: i for i, k in enumerate(keys)}
    z = np.full((len(keys), N), np.nan)
    text = np.full((len(keys), N), "", dtype=object)
    for r in table.itertuples(index=False):
        z[row[(r.layer, r.head)], r.pos] = r.recovered
        text[row[(r.layer, r.head)], r.pos] = _hover(r, {}, f" at position {r.pos}")
    x = [f"{i}: {t}" for i, t in enumerate(labels)] if labels and len(labels) == N else list(range(N))
    return _heatmap(z, text, x, [f"L{l}H{h}" for l, h in keys], "recovered per head and position", "position", "head")


def path_grid(table: pd.DataFrame, via: str) -> go.Figure:
    """Sender x receiver heatmap of ``recovered`` through one receiver input (``q``, ``k`` or ``v``)."""
    t = table[table["via"] == via]
    send = list(dict.fromkeys(zip(t["sender_layer"], t["sender_head"])))
    recv = sorted(dict.fromkeys(zip(t["receiver_layer"], t["receiver_head"])))
    z = np.full((len(send), len(recv)), np.nan)
    text = np.full(z.shape, "", dtype=object)
    si, ri = {k: i for i, k in enumerate(send)}, {k: i for i, k in enumerate(recv)}
    for r in t.itertuples(index=False):
        i, j = si[(r.sender_layer, r.sender_head)], ri[(r.receiver_layer, r.receiver_head)]
        z[i, j] = r.recovered
        text[i, j] = (f"<b>L{r.sender_layer}H{r.sender_head} -> L{r.receiver_layer}H{r.receiver_head}</b> via {via}"
                      f"<br>recovered = {html_kit.fmt(r.recovered)}")
    return _heatmap(z, text, [f"L{l}H{h}" for l, h in recv], [f"L{l}H{h}" for l, h in send],
                    f"path patching through the receivers' {via}", "receiver", "sender")


def render_patch(res: PatchResult, atlas: pd.DataFrame | None = None, effects: pd.DataFrame | None = None,
                 labels: list[str] | None = None) -> str:
    """The patching page as an HTML string (module docstring); ``labels``: the tokens of the first pair's positions."""
    m, t = res.meta, res.table
    short = "LD" if m.get("metric") == "logit_diff" else "NLL"
    acc = (f" (share with LD &gt; 0: {m['clean_accuracy']:.0%} / {m['corrupt_accuracy']:.0%})" if "clean_accuracy" in m else "")
    cfg = m.get("config", {})
    parts = [f"<h1>Patching: {html.escape(str(m.get('model', '')))}</h1>",
             *([f'<p class="note partial"><b>Partial run: {html.escape(str(m["partial"]))}</b> (interrupted: the tables hold '
                "only those finished; rerun the command with --resume to finish it)</p>"] if m.get("partial") else []),
             f'<p class="note">{m.get("pairs")} pairs ({html.escape(str(m.get("source", "")))}), {m.get("tokens")} tokens; '
             f"metric {html.escape(str(m.get('metric')))}: clean mean {short} {res.clean.mean():.4f}, corrupt "
             f"{res.corrupt.mean():.4f}{acc}. Direction {html.escape(str(m.get('direction')))}; recovered = (mean patched "
             f"- mean corrupt) / (mean clean - mean corrupt), interval = 95% percentile bootstrap over pairs "
             f"({cfg.get('bootstrap')} resamples). Method {html.escape(str(m.get('method')))}, {m.get('seconds', 0):.1f} s.</p>"]
    if m.get("method") == "path":
        parts += ["<h2>Largest paths</h2>", html_kit.table(t.reindex(t["recovered"].abs().sort_values(ascending=False).index).head(15))]
        parts += [html_kit.figure(path_grid(t, v), f"paths-{v}") for v in dict.fromkeys(t["via"])]
    else:
        parts += ["<h2>Largest recoveries</h2>", html_kit.table(t.reindex(t["recovered"].abs().sort_values(ascending=False).index).head(15))]
        if "pos" in t:
            parts.append(html_kit.figure(position_grid(t, labels), "patch-pos"))
        else:
            parts.append(html_kit.figure(recovered_grid(t, atlas_roles(atlas), effect_notes(effects)), "patch-grid"))
    return (f"<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>interp patch: {html.escape(str(m.get('model', '')))}"
            f"</title><style>{html_kit.CSS}</style><script>{get_plotlyjs()}</script></head><body>{''.join(parts)}</body></html>")


def write_patch(res: PatchResult, out: str | Path, atlas: pd.DataFrame | None = None, effects: pd.DataFrame | None = None,
                labels: list[str] | None = None) -> dict[str, Path]:
    """Write ``patch.json`` (``res.meta``), ``patch.html`` and the table (``paths.csv`` for path patching, else
    ``patch.csv``) into the folder ``out`` (created), each atomically; the table last, so its presence means the run
    and its other files are complete. Returns ``{name: path}``."""
    d = Path(out)
    d.mkdir(parents=True, exist_ok=True)
    paths = {"patch.json": write_text_atomic(d / "patch.json", json.dumps(res.meta, indent=2, default=str)),
             "patch.html": write_text_atomic(d / "patch.html", render_patch(res, atlas, effects, labels))}
    name = "paths.csv" if res.meta.get("method") == "path" else "patch.csv"
    paths[name] = write_atomic(d / name, lambda tmp: res.table.to_csv(tmp, index=False))
    return paths
