"""Jin et al. (ICML 2025) Fig. 1 and their "destruction" on the zoo models: massive q/k channels, their RoPE planes, v.

For each installed model: ``--prompts`` pydoc prompts of ``--tokens`` tokens (default 4 x 512: a small run, stated
in every table's ``prompts`` / ``tokens`` columns), one scan with the ``massive`` measure (``interp.measures.massive``:
per head and channel the L2 norm over all positions, M[h, d], of q and k before and after RoPE and of v) and the
``token_match`` measure, then Jin et al.'s destruction (``interp.experiments.massive.destruction``): the massive
post-RoPE q/k channels of every layer (rule M[h,d] > 5 x mean_d M[h,d]) replaced by their per-forward mean
(``interp.hooks.intervene.massive_intervention``), against as many random channels per head; mean next-token NLL on
the same prompts and the change of every head-table score.

Writes into ``--out`` (default ``figures/``):

- ``massive_values_<model>.csv``: one row per (kind, layer, plane): kind in q_pre, q_rot, k_pre, k_rot, v;
  ``inv_freq`` (the layer's RoPE frequency of the plane, rad / position), ``ratio_max`` (largest M / mean_d M over
  the heads and the plane's two channels), ``ratio_mean``, ``n_massive`` (massive channels in the plane, over heads),
  ``n_channels``;
- ``massive_values_<model>.html`` / ``.png``: ratio_max against plane frequency for q, k (post-RoPE) and v, one
  point per layer and plane, the threshold as a line (Jin et al. Fig. 1 analogue: their heat maps show M per
  head and channel for one layer);
- ``massive_values_summary.csv``: per model and kind: heads, massive channels, heads with one, the share of massive
  channels per frequency third (high / medium / low, ``numpy.array_split`` of the planes) and the median plane;
- ``massive_values_destruction.csv``: per model and condition (baseline, massive, random): NLL and its change;
- ``massive_values_scores.csv``: per model, condition and head-table column: mean over heads before / after,
  mean change, mean |change|.

    python -m analyses.atlas.massive_values [--quick] [--models ...] [--prompts 4] [--tokens 512] [--lam 5] [--out figures]
"""

from __future__ import annotations

import gc
import time
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots

import interp
from interp.engine import ScanConfig
from interp.experiments.massive import destruction
from interp.measures.massive import channel_table
from interp.models.arch import rope_specs

from analyses._common import installed, parser, save_figure

BANDS = ("high", "medium", "low")


def plane_table(model, result, lam: float) -> pd.DataFrame:
    """Per (kind, layer, plane): ``inv_freq``, ``ratio_max``, ``ratio_mean``, ``n_massive``, ``n_channels``."""
    t = channel_table(result, lam)
    g = t.groupby(["kind", "layer", "plane"], sort=False)
    out = g.agg(ratio_max=("ratio", "max"), ratio_mean=("ratio", "mean"), norm_mean=("norm", "mean"),
                n_massive=("massive", "sum"), n_channels=("massive", "size")).reset_index()
    freq = torch.stack([s.inv_freq.double() for s in rope_specs(model.hf)]).numpy()  # [layer, freq]
    out.insert(3, "inv_freq", freq[out["layer"].to_numpy(), out["plane"].to_numpy()])
    return out


def summary_rows(name: str, result, lam: float) -> list[dict]:
    """Per kind: heads, massive channels, heads with at least one, their share per frequency third, the median plane."""
    t = channel_table(result, lam)
    n_freq = result.card.d_head // 2
    band_of = np.empty(n_freq, dtype=object)
    for b, idx in zip(BANDS, np.array_split(np.arange(n_freq), 3)):
        band_of[idx] = b
    rows = []
    for kind, k in t.groupby("kind", sort=False):
        m = k[k["massive"]]
        heads = k.groupby(["layer", "head"])["massive"].any()
        row = {"model": name, "kind": kind, "heads": len(heads), "massive_channels": len(m),
               "heads_with_massive": int(heads.sum()), "share_heads_with_massive": float(heads.mean()),
               "median_plane": float(m["plane"].median()) if len(m) else np.nan, "n_planes": n_freq,
               "max_ratio": float(k["ratio"].max())}
        for b in BANDS:
            row[f"share_{b}"] = float((band_of[m["plane"].to_numpy()] == b).mean()) if len(m) else np.nan
        rows.append(row)
    return rows


def figure(name: str, planes: pd.DataFrame, lam: float, n_prompts: int, n_tokens: int) -> go.Figure:
    """Three panels (q, k post-RoPE; v): ratio_max against the plane's frequency, one point per layer and plane."""
    kinds = [("q_rot", "queries (post-RoPE)"), ("k_rot", "keys (post-RoPE)"), ("v", "values (channel's plane)")]
    fig = make_subplots(rows=1, cols=3, subplot_titles=[t for _, t in kinds], shared_yaxes=True)
    for c, (kind, _) in enumerate(kinds, start=1):
        p = planes[planes["kind"] == kind]
        fig.add_trace(go.Scatter(x=p["inv_freq"], y=p["ratio_max"], mode="markers",
                                 marker=dict(size=5, color=p["layer"], colorscale="Viridis", showscale=c == 3,
                                             colorbar=dict(title="layer")),
                                 text=[f"layer {l}, plane {q}, massive channels {n}" for l, q, n in
                                       zip(p["layer"], p["plane"], p["n_massive"])], name=kind, showlegend=False), row=1, col=c)
        fig.add_hline(y=lam, line_dash="dash", line_color="red", row=1, col=c)
        fig.update_xaxes(type="log", title_text="plane frequency theta_l (rad / position)", row=1, col=c)
    fig.update_yaxes(type="log")
    fig.update_yaxes(title_text="max over heads of M[h,d] / mean_d M[h,d]", row=1, col=1)
    fig.update_layout(title=f"{name}: channel norms against RoPE frequency ({n_prompts} pydoc prompts x {n_tokens} tokens; "
                            f"dashed: Jin et al.'s lambda = {lam:g})", height=430, width=1250)
    return fig


def run_model(name: str, n_prompts: int, n_tokens: int, lam: float, out: Path) -> dict:
    """Scan, tables, figure and destruction for one model."""
    model = interp.load_model(name, device="cpu")
    prompts = interp.corpus.prompts(model, "pydoc", n_prompts=n_prompts, n_tokens=n_tokens)
    t0 = time.perf_counter()
    d = destruction(model, list(prompts), lam=lam, cfg=ScanConfig(massive=True, token_match=True, counterfactual_queries=0))
    seconds = time.perf_counter() - t0
    planes = plane_table(model, d.base, lam)
    planes.insert(0, "model", name)
    planes["prompts"], planes["tokens"] = n_prompts, n_tokens
    planes.to_csv(out / f"massive_values_{name}.csv", index=False, float_format="%.6g")
    save_figure(figure(name, planes, lam, n_prompts, n_tokens), out, f"massive_values_{name}")
    summ = pd.DataFrame(summary_rows(name, d.base, lam)).assign(prompts=n_prompts, tokens=n_tokens, lam=lam)
    dest = d.summary.assign(model=name, prompts=n_prompts, tokens=n_tokens, lam=lam)
    scores = d.scores.assign(model=name)
    print(f"{name}: {seconds:.0f} s; " + "; ".join(f"{r.condition} NLL {r.nll:.4f}" for r in dest.itertuples()))
    del model, d
    gc.collect()
    return {"planes": planes, "summary": summ, "destruction": dest, "scores": scores}


def main(argv=None) -> dict:
    ap = parser(__doc__, "2 prompts x 128 tokens (seconds per model)")
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--lam", type=float, default=5.0)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    n_prompts, n_tokens = (2, 128) if args.quick else (args.prompts, args.tokens)
    args.out.mkdir(parents=True, exist_ok=True)
    got = {"summary": [], "destruction": [], "scores": [], "planes": {}}
    for name in installed(args.models):
        r = run_model(name, n_prompts, n_tokens, args.lam, args.out)
        got["planes"][name] = r["planes"]
        for k in ("summary", "destruction", "scores"):
            got[k].append(r[k])
    for k in ("summary", "destruction", "scores"):
        got[k] = pd.concat(got[k], ignore_index=True) if got[k] else pd.DataFrame()
        got[k].to_csv(args.out / f"massive_values_{k}.csv", index=False, float_format="%.6g")
    return got


if __name__ == "__main__":
    main()
