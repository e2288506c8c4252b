"""The self-contained head-finding report: one HTML file, plotly.js inlined, no external requests.

Sections: model card; layer x head heatmaps of every measurement (dropdown); the SDH table; average
attention maps of the top SDHs; a (layer, head) picker showing that head's average attention map
and slash spectrum; long-range slash-dominant heads and content repeats; frequencies (band ablation,
when the scan has counterfactual variants); sinks; then the sections that measures contribute
(``interp.report.sections``: e.g. heavy-hitter tokens when the scan has the ``heavy_hitters`` measure, decoded with the
tokenizer passed to ``render``). All text from the model (tokens) is escaped.
"""

from __future__ import annotations

import base64
import html
from pathlib import Path

import numpy as np
import pandas as pd
from plotly.offline import get_plotlyjs

from interp.experiments.ablation import band_ablation_table, ratio_summary
from interp.report import figures
from interp.report.sections import measure_sections
from interp.report.tables import content_repeats
from interp.engine import ScanResult
from interp.report import html as html_kit
from interp.measures import inp as inp_measure
from interp.measures import prompt_count
from interp.measures.sinks import sink_rates
from interp.measures.slash import long_min_tokens, no_long_lags

SDH_COLUMNS = ["layer", "head", "kv_head", "slash_score", "slash_delta", "r1_q", "r1_k", "R95_q", "R95_k", "sink_weight", "ood_ratio"]
LONG_STRIDE = 10  # lag step of the long-range spectra embedded in the page


def sdh_table(heads: pd.DataFrame) -> pd.DataFrame:
    """Short-range SDHs sorted by slash score (columns: ``SDH_COLUMNS`` that exist)."""
    cols = [c for c in SDH_COLUMNS if c in heads]
    return heads.loc[heads["is_sdh"], cols].sort_values("slash_score", ascending=False)


def _card_table(result: ScanResult) -> pd.DataFrame:
    c = result.card
    theta = sorted(set(c.rope_theta))
    windows = sorted({w for w in c.sliding_window if w is not None})
    rows = [
        ("model", c.name), ("architecture", c.architecture + (f" ({c.family} family)" if c.family else "")), ("layers", c.n_layers), ("query heads", c.n_heads),
        ("kv heads", f"{c.n_kv_heads} (group size {c.group_size})"), ("d_head", c.d_head),
        ("RoPE base per layer", ", ".join(f"{t:g}" for t in theta) + ("" if len(theta) == 1 else " (see card)")),
        ("channel pairing", c.pairing), ("rotary fraction", f"{c.rotary_fraction:g} ({c.rotary_dim or c.d_head} of {c.d_head} channels)"),
        ("RoPE scaling", c.rope_scaling), ("context length", c.context_length), ("dtype", c.dtype),
        ("sliding window", ", ".join(map(str, windows)) + f" on {sum(w is not None for w in c.sliding_window)} layers" if windows else "none"),
        ("attention scale", ", ".join(f"{s:g}" for s in sorted(set(c.attn_scale)))),
        ("QK-norm / q,k bias", f"{c.qk_norm} / {c.qk_bias}"), ("weights", c.source), ("quantisation", c.quantization),
        ("sha256", c.sha256 or "-"),
        ("scan", f"{result.meta.get('corpus', '?')}: {result.meta.get('prompts')} prompts x {max(result.meta.get('tokens') or [0])} tokens"
                 + (f" ({result.meta['seconds']:.1f} s, {result.meta['engine']} engine)" if "engine" in result.meta and "seconds" in result.meta else "")),
    ]
    return pd.DataFrame(rows, columns=["field", "value"])


def _picker_data(result: ScanResult) -> dict:
    maps = result.maps().float().cpu().numpy()
    L, H, M, _ = maps.shape
    scores = np.nan_to_num(result.scores.float().cpu().numpy(), nan=0.0)
    n = scores.shape[-1]
    short = scores[..., : min(n, 64)]
    lags = result.long_lag_range()
    long_d = np.arange(lags.start, lags.stop, LONG_STRIDE)
    return {
        "L": L, "H": H, "M": M,
        # probabilities in [0, 1] as uint16 (absolute error <= 7.6e-6): half the bytes of float32
        "maps": base64.b64encode(np.round(maps.clip(0, 1) * 65535).astype("<u2").tobytes()).decode(),
        "short": short.round(5).tolist(),
        "long_d": long_d.tolist(),
        "long": scores[..., long_d].round(7).tolist() if long_d.size else [],
        "tokens": result.meta.get("sample_tokens", [])[:M],
        **_plane_data(result),
    }


def _plane_data(result: ScanResult) -> dict:
    """Per-head mean |InP| and signed mean per plane for the picker (empty without ``ScanConfig.inp``)."""
    if not result.config.inp:
        return {"planes": [], "planes_s": [], "inpq": "", "inpq_scale": [], "inpq_shape": [0, 0]}
    mean_s, mean_a = (m.nan_to_num(nan=0.0) for m in inp_measure.means(result))  # a head with no visible pair: 0
    qmap = result.inp_query_map().double().cpu().numpy()  # [layer, head, key, freq]
    # int16 per head (relative error <= 1.5e-5 of the head's max |InP|): half the size of float32 in the page
    scale = np.abs(qmap).max(axis=(2, 3)).clip(min=1e-30)
    q16 = np.round(qmap / scale[:, :, None, None] * 32767).astype("<i2")
    return {"planes": mean_a.float().numpy().round(5).tolist(), "planes_s": mean_s.float().numpy().round(5).tolist(),
            "inpq": base64.b64encode(q16.tobytes()).decode(), "inpq_scale": (scale / 32767).tolist(), "inpq_shape": list(qmap.shape[2:])}



LONG_COLUMNS = ["layer", "head", "long_slash_score", "long_slash_delta", "long_slash_prompt_frac", "long_ood_slash_score"]


def _long_range_section(result: ScanResult, heads: pd.DataFrame, top: int = 5) -> list[str]:
    """Long-range SDHs that hold across prompts first, then the lags that hold in too few prompts (content repeats); for
    prompts too short for any long lag, a note saying so and the prompt length that would fill the section."""
    if "slash_prompts" in result.state and (why := no_long_lags(result)):
        return ["<h2>Long-range slash-dominant heads: not measured</h2>",
                f'<p class="note">{html.escape(why[0].upper() + why[1:])}. Scan with <code>--tokens '
                f"{long_min_tokens(result.config)}</code> or more to fill this section, long_slash.csv and content_repeats.csv "
                "(written with their header only).</p>"]
    lags = result.long_lag_range()
    if not lags or "long_any_slash_score" not in heads or heads["long_any_slash_score"].isna().all():
        return []
    cfg = result.config
    P = int(prompt_count(result))
    consistent = heads[heads["is_sdh_long"]].sort_values("long_slash_score", ascending=False)
    repeats = content_repeats(result, heads)
    shown = consistent.head(top)
    sc = result.scores.float().cpu().numpy()
    d = np.arange(lags.start, lags.stop)
    rows = list(shown.itertuples()) + [r for r in repeats.head(2).itertuples()]
    names = [f"L{r.layer}H{r.head}" for r in shown.itertuples()] + [f"L{r.layer}H{r.head} (content repeat)" for r in repeats.head(2).itertuples()]
    parts = [f"<h2>Long-range slash-dominant heads: {len(consistent)} with mean attention at least {cfg.kappa_long:g} at one "
             f"lag in {lags.start}..{lags.stop - 1}, in at least {cfg.long_min_frac:.0%} of the {P} prompts "
             "(kappa_long; paper 004, App. C)</h2>",
             f'<p class="note">A long lag counts only when the head is slash-dominant there in at least {cfg.long_min_frac:.0%} of the '
             "prompts; a lag that holds in fewer is a passage repeated within a prompt and copied by content, not a positional "
             f"slash (paper 004, App. C and Table 6). Lags with at least {cfg.long_min_entries} entries per prompt.</p>"]
    if rows:
        fig = figures.slash_spectrum(d, np.stack([sc[r.layer, r.head, d] for r in rows]), names, cfg.kappa_long)
        parts.append(html_kit.figure(fig, "long-slash"))
    parts.append(html_kit.table(shown[[c for c in LONG_COLUMNS if c in shown]]) if len(shown) else
                 '<p class="note">No head has a long lag that holds across prompts.</p>')
    if len(repeats):
        parts += [f"<h3>Content repeats: {len(repeats)} heads whose best long lag holds in fewer than {cfg.long_min_frac:.0%} of the prompts</h3>",
                  '<p class="note">prompt: the index of the only prompt where the lag is slash-dominant (-1: more than one); '
                  "prompt_score: that prompt's own score.</p>",
                  '<div class="scroll">' + html_kit.table(repeats) + "</div>"]
    return parts


def _frequency_section(result: ScanResult, heads: pd.DataFrame, causal: pd.DataFrame | None) -> list[str]:
    """Band ablation (counterfactual) table and box plot, and the causal summary when given (paper 004, Sec. 5)."""
    if not result.config.variants:
        return []
    table = band_ablation_table(result, heads)
    planes = "; ".join(f"{v.name}: planes {', '.join(map(str, getattr(v, 'planes', ())))}" for v in result.config.variants)
    parts = ["<h2>Frequencies: band ablation of the slash-dominant heads</h2>",
             '<p class="note">Each head\'s attention recomputed exactly with some rotation planes left unrotated (theta -> 0, '
             "channels kept; plane 0 = highest frequency, model pairing), and its average slash score at its own lag compared "
             f"with the original (paper 004, Table 5 and Fig. 8). {html.escape(planes)}.</p>"]
    if len(table):
        parts += [html_kit.figure(figures.band_ratio_box(table), "band-box"),
                  html_kit.table(ratio_summary(table)),
                  '<div class="scroll">' + html_kit.table(table) + "</div>"]
    else:
        parts.append('<p class="note">No slash-dominant heads in this scan.</p>')
    if result.config.inp and len(table):
        mean_abs = inp_measure.means(result)[1].nan_to_num(nan=0.0).numpy()
        z = np.stack([mean_abs[r.layer, r.head] / max(mean_abs[r.layer, r.head].max(), 1e-30) for r in table.itertuples()])
        labels = [f"L{r.layer}H{r.head} lag {r.delta}" for r in table.itertuples()]
        parts += ["<h3>Which RoPE planes the slash-dominant heads use: each plane's part of the query-key logit (mean |InP|)</h3>",
                  '<p class="note">InP(i, j, l) = q_rot_i^(l) . k_rot_j^(l), the part of the logit carried by plane l (paper 004, eq. 8-9), '
                  "averaged in absolute value over the visible pairs (keys 0..3 dropped) and divided by each head's maximum; "
                  "planes at >= 0.1 are active (004 Sec. 4). The picker above shows any head's spectrum, signed mean too.</p>",
                  html_kit.figure(figures.plane_heatmap(z, labels, "SDHs: mean |InP| per plane / head maximum"), "plane-heatmap")]
    if causal is not None and len(causal):
        parts += ["<h3>Causal ablation: the model run with each band unrotated</h3>",
                  '<p class="note">Mean next-token negative log-likelihood (nats per token) on the same prompts.</p>', html_kit.table(causal)]
    return parts


def token_strip(tokens: list[str]) -> str:
    """Tokens as a wrapping row of boxes, each with its position above it and its white space made visible (a space
    as a middle dot, a line break as a return arrow, a tab as an arrow), escaped for HTML."""
    shown = [t.replace(" ", "\u00b7").replace("\n", "\u21b5").replace("\t", "\u2192") or "\u2205" for t in tokens]
    return ('<div class="tokstrip">' + "".join(f'<span class="tok"><span class="pos">{i}</span>{html.escape(t)}</span>'
                                             for i, t in enumerate(shown)) + "</div>")


def render(result: ScanResult, heads: pd.DataFrame | None = None, top_maps: int = 6, causal: pd.DataFrame | None = None,
           tokenizer=None, links: dict[str, str] | None = None) -> str:
    """The report as an HTML string (see module docstring). ``tokenizer`` (``model.tokenizer``) decodes the
    heavy-hitter tokens; without it they are shown as ids. ``links``: ``{text: relative URL}`` of related pages
    (the head atlas) shown under the title."""
    heads = result.heads if heads is None else heads
    sdh = sdh_table(heads)
    top = sdh.head(top_maps)
    maps = result.maps().float().cpu().numpy()
    parts = [f"<h1>Head-finding report: {html.escape(result.card.name)}</h1>",
             *([f'<p class="note partial"><b>Partial run: {html.escape(str(result.meta["partial"]))}</b> (interrupted; every '
                "table below covers the finished prompts only; rerun the command with --resume to finish it)</p>"]
               if result.meta.get("partial") else []),
             '<p class="note">Measurements as defined in the interp README and docstrings (papers 004 and 001). Attention is recomputed exactly from '
             "post-RoPE queries and keys with the model's own scale and masks.</p>",
             *(['<p class="note">See also: ' + ", ".join(f'<a href="{html.escape(u)}">{html.escape(t)}</a>' for t, u in links.items())
                + "</p>"] if links else []),
             "<h2>Model card</h2>", html_kit.table(_card_table(result), "tbl card"),
             "<h2>Per-head measurements (layer x head)</h2>", html_kit.figure(figures.metric_heatmaps(heads), "heatmaps"),
             f"<h2>Slash-dominant heads: {len(sdh)} of {len(heads)}, with mean attention at least {result.config.kappa:g} at "
             f"one lag 0..4 (kappa; paper 004, Def. 3.1, eq. 6)</h2>",
             '<p class="note">The slash score of a head at lag delta is its mean attention from each query i to the key '
             "delta positions back (a diagonal of the attention map: a slash); slash_delta is the lag of the best one. "
             "Click a row to show that head in the picker below.</p>",
             '<div class="scroll">' + html_kit.table(sdh, "tbl sdh") + "</div>"]
    if len(top):
        parts += ["<h2>Average attention maps of the top SDHs</h2>", html_kit.figure(figures.sdh_maps(maps, top), "sdh-maps")]
    parts += ['<h2 id="picker">Any head: average attention map and slash spectrum</h2>',
              '<select id="pick-layer"></select> <select id="pick-head"></select>',
              '<div id="pick-map" class="fig"></div><div id="pick-slash" class="fig"></div><div id="pick-planes" class="fig"></div><div id="pick-inp" class="fig"></div>']
    parts += _long_range_section(result, heads)
    parts += _frequency_section(result, heads, causal)
    if heads["sink_weight_norope"].notna().any():
        rates, eps = sink_rates(heads), result.config.sink_eps
        gu = ("" if np.isnan(rates["gu"]) else
              f"; sink rate {rates['gu']:.1%}: the share of heads and prompts above it (Gu et al. 2024)")
        parts += [f"<h2>Sinks: {rates['of_mean']:.1%} of heads give token 0 more than {eps:g} of their attention on average"
                  f" (sink_eps{gu})</h2>", html_kit.figure(figures.sink_scatter(heads), "sinks")]
    parts += measure_sections(result, tokenizer)  # views of measures that contribute one (interp.report.sections)
    toks = result.meta.get("sample_tokens", [])
    if toks:
        parts += ["<h2>First tokens of the first prompt</h2>",
                  '<p class="note">One box per token, its position above it; a space is shown as \u00b7, a line break as '
                  "\u21b5, a tab as \u2192.</p>", token_strip(toks)]
    row_js = ("document.querySelectorAll('table.sdh tbody tr').forEach(function(tr){tr.style.cursor='pointer';"
              "tr.onclick=function(){var c=tr.children;interpPick(+c[0].textContent,+c[1].textContent);};});")
    body = "\n".join(parts)
    return (f"<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>interp report: {html.escape(result.card.name)}</title>"
            f"<style>{html_kit.CSS}</style><script>{get_plotlyjs()}</script></head><body>{body}"
            f"<script>{html_kit.fill(html_kit.asset('picker.js'), DATA=_picker_data(result))}{row_js}</script></body></html>")


def write_report(result: ScanResult, path: str | Path, heads: pd.DataFrame | None = None, causal: pd.DataFrame | None = None,
                 tokenizer=None, links: dict[str, str] | None = None) -> Path:
    """Write the self-contained report to ``path`` (parents created; atomically, ``interp.io``). Returns the path.
    ``tokenizer`` (``model.tokenizer``) decodes the heavy-hitter tokens, ``links`` names related pages (``render``)."""
    from interp.io import write_text_atomic

    return write_text_atomic(path, render(result, heads, causal=causal, tokenizer=tokenizer, links=links))
