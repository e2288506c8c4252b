"""The head atlas page (``atlas.html``): every head's role on a layer x head grid, with every score on hover; role
counts and rules; the role co-occurrence table; role against r1 and against InP band use; each role score's
distribution with its threshold (so a reader can pick another); with band ablations, which frequencies each role
needs. One self-contained HTML file (plotly.js inlined, no requests). Definitions: ``interp.experiments.atlas``.
"""

from __future__ import annotations

import html
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.offline import get_plotlyjs
from plotly.subplots import make_subplots

from interp.experiments.atlas import BANDS, ROLE_NAMES, RR_COLUMNS, AtlasResult, band_attribution, cooccurrence, role_summary
from interp.io import write_text_atomic
from interp.report import html as html_kit

# one colour per role (ROLES order) and grey for none; colour-blind-safe palette (Okabe-Ito) plus two
COLOURS = {"retrieval": "#D55E00", "induction": "#CC79A7", "echo": "#E69F00", "duplicate_token": "#F0E442",
           "previous_token": "#56B4E9", "sdh": "#0072B2", "streaming": "#009E73", "sink": "#999933", "none": "#DDDDDD"}
HOVER = ("slash_score", "slash_delta", "sink_weight", "prev_token_score", "duplicate_token_score", "induction_score",
         *RR_COLUMNS, "retrieval_score", "entropy_norm", "distant_mass", "vertical_top1pct", "r1_q", "r1_k",
         "inp_active_high", "inp_active_medium", "inp_active_low")


def effect_hover(d: dict, table: pd.DataFrame) -> list[str]:
    """Hover lines of a head's causal effects (``interp atlas --effects``: ``dnll_<name>`` with its 95% interval
    ``dnll_<name>_lo`` / ``_hi``, and ``kl_<name>``, nats), one per intervention; empty without effect columns."""
    out = []
    for c in table.columns:
        if c.startswith("dnll_") and not c.endswith(("_lo", "_hi")):
            k = c[len("dnll_"):]
            ci = f" [{html_kit.fmt(d[c + '_lo'])}, {html_kit.fmt(d[c + '_hi'])}]" if f"{c}_lo" in d and f"{c}_hi" in d else ""
            kl = f", KL {html_kit.fmt(d['kl_' + k])}" if f"kl_{k}" in d else ""
            out.append(f"what it does, {k}: dNLL = {html_kit.fmt(d[c])}{ci}{kl} nats")
    return out


def role_grid(table: pd.DataFrame) -> go.Figure:
    """Layer x head grid coloured by each head's ``role`` (``interp.experiments.atlas``), every score, with
    ``role_support`` columns the support of the head's roles, and with effect columns (``--effects``) the loss change
    of each intervention on hover: where the head looks and what it does, side by side."""
    names = list(ROLE_NAMES) + ["none"]
    idx = {n: i for i, n in enumerate(names)}
    L, H = int(table["layer"].max()) + 1, int(table["head"].max()) + 1
    z = np.full((L, H), np.nan)
    text = np.full((L, H), "", dtype=object)
    cols = [c for c in HOVER if c in table and table[c].notna().any()]
    for r in table.itertuples(index=False):
        d = r._asdict()
        z[r.layer, r.head] = idx[r.role]
        vals = "<br>".join([f"{c} = {html_kit.fmt(d[c])}" for c in cols] + effect_hover(d, table))
        roles = d["roles"] if isinstance(d["roles"], str) else ""  # a table read back from CSV has NaN for none
        sup = ", ".join(f"{n} {html_kit.fmt(d[f'support_{n}'])}" for n in roles.split(";") if n and f"support_{n}" in d)
        text[r.layer, r.head] = (f"<b>L{r.layer}H{r.head}</b> (kv {r.kv_head}): {roles or 'no role'}"
                                 + (f" (support: {sup})" if sup else "") + f"<br>{vals}")
    n = len(names)
    scale = []
    for i, name in enumerate(names):  # a stepped colour scale: role i owns [i/n, (i+1)/n]
        scale += [[i / n, COLOURS[name]], [(i + 1) / n, COLOURS[name]]]
    fig = go.Figure(go.Heatmap(z=z, zmin=-0.5, zmax=n - 0.5, colorscale=scale, text=text, hoverinfo="text", xgap=1, ygap=1,
                               colorbar=dict(tickvals=list(range(n)), ticktext=names, title="role")))
    fig.update_layout(title="Dominant role of every head (first of its roles, most specific first)", xaxis_title="head",
                      yaxis_title="layer", height=max(420, 20 * L + 160))
    fig.update_xaxes(tick0=0, dtick=1 if H <= 32 else 2)
    fig.update_yaxes(tick0=0, dtick=1 if L <= 32 else 2)
    return fig


def role_r1(table: pd.DataFrame) -> go.Figure:
    """Box plots of r1 of queries and keys (004 eq. 7) per role, and of the heads with no role."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("r1 of queries (r1_q)", "r1 of keys (r1_k)"))
    groups = [(n, table[f"role_{n}"].to_numpy(bool)) for n in ROLE_NAMES] + [("none", (table["role"] == "none").to_numpy())]
    for col, c in ((1, "r1_q"), (2, "r1_k")):
        for name, on in groups:
            if on.any():
                fig.add_trace(go.Box(y=table.loc[on, c], name=name, marker_color=COLOURS[name], showlegend=False,
                                     boxpoints="all", jitter=0.4, pointpos=0), row=1, col=col)
    fig.update_yaxes(title_text="share of the first singular value (r1)", range=[0, 1.02])
    fig.update_layout(height=420, title="Roles against near-rank-one queries and keys (004 eq. 7)")
    return fig


def role_bands(summary: pd.DataFrame) -> go.Figure | None:
    """Grouped bars: median active InP planes per band (004 eq. 9) of each role's heads; None without InP."""
    cols = [c for c in ("inp_active_high", "inp_active_medium", "inp_active_low") if c in summary]
    if not cols:
        return None
    fig = go.Figure([go.Bar(x=summary["role"], y=summary[c], name=c.replace("inp_active_", "") + " band") for c in cols])
    fig.update_layout(barmode="group", height=380, title="Roles against RoPE band use: median number of planes active in each band (InP)",
                      yaxis_title="active planes (InP share >= 0.1)", xaxis_title="role")
    return fig


def score_histograms(table: pd.DataFrame, summary: pd.DataFrame) -> go.Figure:
    """The distribution over heads of each thresholded role score, with its threshold as a vertical line."""
    rows = summary[summary["threshold"].notna() & summary["score"].isin(table.columns)]
    rows = rows[[table[c].notna().any() for c in rows["score"]]]
    n = max(len(rows), 1)
    fig = make_subplots(rows=1, cols=n, subplot_titles=[f"{r.role}: {r.score}" for r in rows.itertuples()] or None)
    for i, r in enumerate(rows.itertuples()):
        fig.add_trace(go.Histogram(x=table[r.score], nbinsx=40, marker_color=COLOURS[r.role], showlegend=False), row=1, col=i + 1)
        fig.add_vline(x=r.threshold, line_dash="dash", row=1, col=i + 1)
    fig.update_layout(height=320, title="Score distributions over heads; dashed: the role threshold")
    fig.update_yaxes(title_text="heads", row=1, col=1)
    return fig


def band_bars(attr: pd.DataFrame) -> go.Figure:
    """Median ratio ablated / original of each role's score under each band ablation (004 Fig. 8, per role)."""
    fig = go.Figure([go.Bar(x=attr["role"], y=attr[f"ratio_{b}"], name=b) for b in BANDS])
    fig.add_hline(y=1.0, line_dash="dot")
    fig.update_layout(barmode="group", height=380, yaxis_title="median ratio ablated / original", xaxis_title="role",
                      title="Which RoPE frequencies each role needs (counterfactual band ablation, same pass)")
    return fig


def render_atlas(res: AtlasResult, report_link: str | None = "report.html") -> str:
    """The atlas page as an HTML string (module docstring)."""
    t, cfg, card = res.table, res.config, res.text.card
    summary = role_summary(t, res.attainable)
    co = cooccurrence(t).reset_index().rename(columns={"index": "role"})
    attr = band_attribution(t)
    secs = ", ".join(f"{k.replace('_', '-')} {v:.1f} s" for k, v in res.seconds.items())
    link = f' The head-finding report of the text pass: <a href="{html.escape(report_link)}">{html.escape(report_link)}</a>.' if report_link else ""
    parts = [f"<h1>Head atlas: {html.escape(card.name)}</h1>",
             f'<p class="note">Text pass: {cfg.prompts} x {cfg.tokens} tokens of {html.escape(cfg.corpus)} (seed {cfg.seed}); '
             f"repeated-random pass: {cfg.prompts} prompts of {cfg.tokens} tokens (BOS, then r repeated {cfg.repeats} times)"
             + ("; retrieval pass: needle-in-a-haystack decoding" if res.retrieval is not None else "")
             + f". Wall time: {secs}. Every score is exact (streaming, no [head, pos, pos] materialised); definitions in "
               f"interp.experiments.atlas and the measures' docstrings.{link}</p>",
             html_kit.figure(role_grid(t), "atlas-grid"),
             "<h2>Roles: rules, counts, near-rank-one queries and keys (r1) and RoPE band use</h2>",
             '<p class="note">A head may hold several roles; "dominant" counts the heads whose grid colour the role is. '
             "Thresholds that read a token-matched score lie 0.4 of the way from chance (a head attending uniformly over "
             "its causal keys) to the share of queries that can attend such a key (the rule of the TransformerLens / "
             "ARENA induction-head exercises, rescaled to detect_head's mean over all queries). Medians of r1 and of active InP planes per band: the role's heads against the rest.</p>",
             '<div class="scroll">' + html_kit.table(summary) + "</div>",
             html_kit.figure(score_histograms(t, summary), "atlas-hist"),
             "<h2>Role co-occurrence (heads holding both roles; diagonal: heads with the role)</h2>",
             html_kit.table(co),
             html_kit.figure(role_r1(t), "atlas-r1")]
    bands = role_bands(summary)
    if bands is not None:
        parts.append(html_kit.figure(bands, "atlas-bands"))
    if res.effects is not None:
        m = res.effects.meta
        parts += ["<h2>What each head does: causal effects</h2>",
                  f'<p class="note">Every head x {html.escape(", ".join(m["config"]["interventions"]))} on {m["prompts"]} x '
                  f'{m["tokens"]} tokens of the text pass (interp.experiments.effects.head_effects; clean NLL '
                  f'{m["clean_nll"]:.4f} nats): the change of the mean next-token loss with the head changed, with its 95% '
                  "bootstrap interval over prompts, and the KL from the clean distribution, on the grid's hover beside "
                  "where the head looks. Columns dnll_&lt;intervention&gt;, dnll_&lt;intervention&gt;_lo / _hi and "
                  "kl_&lt;intervention&gt; of atlas.csv.</p>"]
    if len(attr):
        parts += ["<h2>Band attribution: each role's score without the high / medium / low RoPE planes</h2>",
                  '<p class="note">Counterfactual (004 Table 5): attention recomputed in the same pass with six planes of '
                  "a band left unrotated; medians over the role's heads of the score and of the per-head ratio ablated / "
                  "original. The echo score has no ablated value.</p>",
                  html_kit.table(attr), html_kit.figure(band_bars(attr), "atlas-ablation")]
    return (f"<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>interp atlas: {html.escape(card.name)}</title>"
            f"<style>{html_kit.CSS}</style><script>{get_plotlyjs()}</script></head><body>{''.join(parts)}</body></html>")


def write_atlas_page(res: AtlasResult, path: str | Path, report_link: str | None = "report.html") -> Path:
    """Write the self-contained atlas page to ``path`` (atomically, ``interp.io``). Returns the path."""
    return write_text_atomic(path, render_atlas(res, report_link))


def write_atlas(res: AtlasResult, out: str | Path, tokenizer=None) -> dict[str, Path]:
    """Write the atlas into the folder ``out`` (created; each file atomically): ``atlas.csv`` (``res.table``),
    ``atlas_roles.csv`` (``role_summary``), ``atlas_cooccurrence.csv``, ``atlas_ablation.csv`` (with band ablations),
    ``atlas.html``, the text pass's scan outputs (``heads.csv``, ``report.html``, ``state/``...:
    ``interp.report.bundle.write_outputs``; its report links back to the atlas, and ``tokenizer`` decodes its
    heavy-hitter tokens) and the repeated-random pass's state (``rr/state``). Returns ``{name: path}``."""
    from interp.report.bundle import write_csv, write_outputs

    d = Path(out)
    d.mkdir(parents=True, exist_ok=True)
    paths = {"atlas.csv": write_csv(res.table, d / "atlas.csv"),
             "atlas_roles.csv": write_csv(role_summary(res.table, res.attainable), d / "atlas_roles.csv"),
             "atlas_cooccurrence.csv": write_csv(cooccurrence(res.table).reset_index().rename(columns={"index": "role"}),
                                                 d / "atlas_cooccurrence.csv")}
    attr = band_attribution(res.table)
    if len(attr):
        paths["atlas_ablation.csv"] = write_csv(attr, d / "atlas_ablation.csv")
    write_outputs(res.text, d, tokenizer=tokenizer, links={"head atlas of this model": "atlas.html"})
    res.rr.save(d / "rr" / "state")
    paths["atlas.html"] = write_atlas_page(res, d / "atlas.html")
    return paths
