"""The head-effects page (``effects.html``): one layer x head grid per intervention, coloured by ``dnll`` (nats), with
the bootstrap interval, the KL and, when an atlas table is given, the head's roles on hover; the clean NLL and the
settings above. One self-contained HTML file (plotly.js inlined, no requests). Definitions:
``interp.experiments.effects``.
"""

from __future__ import annotations

import html
import json
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.offline import get_plotlyjs

from interp.experiments.effects import EffectsResult
from interp.io import write_atomic, write_text_atomic
from interp.report import html as html_kit


MIN_PROMPTS = 5  # fewer prompts than this: the bootstrap interval over prompts is too coarse to trust (a warning)
NOT_RUN = "#d9d9d9"  # grey of the heads not run (--heads a subset): no colour of the dnll scale, whose 0 is white


def effect_grid(table: pd.DataFrame, intervention: str, roles: dict[tuple[int, int], str] | None = None,
                grid: tuple[int, int] | None = None) -> go.Figure:
    """Layer x head heatmap of ``dnll`` for one intervention (diverging scale centred on 0, white at 0).

    ``grid``: the model's ``(n_layers, n_heads)``; the whole grid is drawn, and the heads the table has no row for
    (not run: ``--heads`` a subset) are grey cells marked "not run" on hover, never a colour of the scale. Without
    ``grid`` the table's largest layer and head bound it. Hover: ``dnll`` with its 95% interval, ``kl`` and, from
    ``roles`` (``{(layer, head): "sdh;sink"}``), the roles.
    """
    t = table[table["intervention"] == intervention]
    L, H = grid if grid is not None else (int(table["layer"].max()) + 1, int(table["head"].max()) + 1)
    z = np.full((L, H), np.nan)
    text = np.full((L, H), "", dtype=object)
    for r in t.itertuples(index=False):
        z[r.layer, r.head] = r.dnll
        role = (roles or {}).get((r.layer, r.head), "")
        text[r.layer, r.head] = (f"<b>L{r.layer}H{r.head}</b> {html.escape(intervention)}<br>dnll = {html_kit.fmt(r.dnll)} nats "
                                 f"[{html_kit.fmt(r.dnll_lo)}, {html_kit.fmt(r.dnll_hi)}]<br>kl = {html_kit.fmt(r.kl)} nats"
                                 + (f"<br>roles: {html.escape(role)}" if roles is not None else ""))
    lim = float(np.nanmax(np.abs(z))) if np.isfinite(z).any() else 1.0
    missing = np.isnan(z) & (text == "")
    traces = [go.Heatmap(z=z, zmin=-lim, zmax=lim, zmid=0, colorscale="RdBu_r", text=text, hoverinfo="text",
                         xgap=1, ygap=1, colorbar=dict(title="dnll (nats)"), name="run")]
    if missing.any():  # a second layer: grey where no head was run (NaN, so transparent, elsewhere), hover "not run"
        traces.append(go.Heatmap(z=np.where(missing, 1.0, np.nan), colorscale=[[0, NOT_RUN], [1, NOT_RUN]], showscale=False,
                                 xgap=1, ygap=1, hoverinfo="text", name="not run", text=_not_run_text(missing)))
    fig = go.Figure(traces)
    shown = "" if not missing.any() else f" (grey: {int(missing.sum())} of {L * H} heads not run)"
    fig.update_layout(title=f"{intervention}: next-token NLL change per head (intervened - clean){shown}", xaxis_title="head",
                      yaxis_title="layer", height=max(380, 18 * L + 160), plot_bgcolor="white")
    fig.update_xaxes(range=[-0.5, H - 0.5])
    fig.update_yaxes(range=[-0.5, L - 0.5])
    fig.update_xaxes(tick0=0, dtick=1 if H <= 32 else 2)
    fig.update_yaxes(tick0=0, dtick=1 if L <= 32 else 2)
    return fig


def _not_run_text(missing: np.ndarray) -> np.ndarray:
    """Hover text of the not-run cells of a ``[layer, head]`` mask."""
    out = np.full(missing.shape, "", dtype=object)
    for layer, head in zip(*np.nonzero(missing)):
        out[layer, head] = f"<b>L{layer}H{head}</b> not run (not in --heads)"
    return out


def atlas_roles(atlas: pd.DataFrame | None) -> dict[tuple[int, int], str] | None:
    """``{(layer, head): roles}`` from an atlas table (``atlas.csv``: columns ``layer, head, roles``), else None."""
    if atlas is None or "roles" not in atlas:
        return None
    return {(int(r.layer), int(r.head)): (r.roles if isinstance(r.roles, str) and r.roles else "none")
            for r in atlas.itertuples(index=False)}


def describe_interventions(names, cfg: dict) -> str:
    """One sentence per requested intervention (``names``, in order), with its settings from ``cfg`` (``EffectsConfig``
    as a dict): only what the run did, no sentence about an intervention it did not run."""
    sink, window, n_remove = cfg.get("sink", 4), cfg.get("window", 64), cfg.get("n_remove")
    planes = "every plane of the band" if n_remove is None else f"{n_remove} planes of the band"
    say = {"zero": "zero: the head's output set to 0",
           "mean": "mean: the head's output replaced by its mean over every position of every prompt",
           "streaming": f"streaming: the head sees only keys 0..{sink - 1} and the last {window} keys (DuoAttention's A-shape)",
           "nope": "nope: every RoPE plane of the head left unrotated"}
    for band in ("high", "medium", "low"):
        say[f"rope_{band}"] = f"rope_{band}: {planes} of {band}-frequency RoPE planes left unrotated"
    return "; ".join(say.get(n, n) for n in names) + "."


def render_effects(res: EffectsResult, atlas: pd.DataFrame | None = None) -> str:
    """The effects page as an HTML string (module docstring). ``res.meta`` ``n_layers`` / ``n_heads`` (the model's
    grid, set by ``interp effects``) make every grid the model's whole one, heads not run in grey."""
    m, t = res.meta, res.table
    roles = atlas_roles(atlas)
    cfg = m.get("config", {})
    grid = (int(m["n_layers"]), int(m["n_heads"])) if "n_layers" in m and "n_heads" in m else None
    names = list(dict.fromkeys(t["intervention"])) or list(cfg.get("interventions", []))
    top = t.reindex(t["dnll"].abs().sort_values(ascending=False).index).head(15)
    n_prompts = int(m.get("prompts") or 0)
    few = (f'<p class="note warn"><b>Only {n_prompts} prompt{"" if n_prompts == 1 else "s"}:</b> the 95% intervals '
           f"resample prompts, and fewer than {MIN_PROMPTS} give intervals too coarse to trust; run with --prompts "
           f"{MIN_PROMPTS} or more.</p>") if n_prompts < MIN_PROMPTS else ""
    parts = [f"<h1>Head effects: {html.escape(str(m.get('model', '')))}</h1>",
             *([f'<p class="note partial"><b>Partial run: {html.escape(str(m["partial"]))}</b> (interrupted; the table holds '
                "the finished layers only; rerun the command with --resume to finish it)</p>"] if m.get("partial") else []),
             f'<p class="note">{m.get("prompts")} prompts x {m.get("tokens")} tokens ({html.escape(str(m.get("corpus", "")))}); '
             f"clean next-token NLL {res.clean_nll:.4f} nats over {m.get('predictions')} predictions. dnll = mean NLL with the "
             f"intervention minus without (nats per prediction), interval = 95% percentile bootstrap over prompts "
             f"({cfg.get('bootstrap')} resamples); kl = mean KL(clean || intervened). Interventions: "
             f"{html.escape(describe_interventions(names, cfg))} Method: {html.escape(str(m.get('method')))}, "
             f"{m.get('seconds', 0):.1f} s." + (" Hover shows the atlas roles." if roles is not None else "") + "</p>",
             few, "<h2>Largest effects</h2>", html_kit.table(top)]
    for i, name in enumerate(names):
        parts.append(html_kit.figure(effect_grid(t, name, roles, grid), f"effects-{i}"))
    return (f"<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>interp effects: {html.escape(str(m.get('model', '')))}"
            f"</title><style>{html_kit.CSS}</style><script>{get_plotlyjs()}</script></head><body>{''.join(parts)}</body></html>")


def write_effects(res: EffectsResult, out: str | Path, atlas: pd.DataFrame | None = None) -> dict[str, Path]:
    """Write ``effects.csv`` (``res.table``), ``effects.json`` (``res.meta``: clean NLL, settings, timing) and
    ``effects.html`` into the folder ``out`` (created), each atomically (temporary file, then rename: an interrupted
    write leaves the previous file or none, never half a table); ``effects.csv`` goes last, so a new one means the
    run and its other files are complete. Returns ``{name: path}``."""
    d = Path(out)
    d.mkdir(parents=True, exist_ok=True)
    paths = {"effects.json": write_text_atomic(d / "effects.json", json.dumps(res.meta, indent=2, default=str)),
             "effects.html": write_text_atomic(d / "effects.html", render_effects(res, atlas))}
    paths["effects.csv"] = write_atomic(d / "effects.csv", lambda tmp: res.table.to_csv(tmp, index=False))  # last: its presence means done
    return paths
