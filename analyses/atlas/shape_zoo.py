"""Shape of attention on the zoo: the distribution of distant mass (streaming vs retrieval heads) that sets the default
``streaming_threshold``, with entropy, A-shape / vertical-slash coverage and the error of MInference's estimate.

For each model, ``--prompts`` pydoc prompts of ``--tokens`` tokens are scanned once with the ``shape`` measure on
(``interp.scan(model, prompts, ScanConfig(shape=True))``; definitions and budgets in ``interp.measures.shape``: at
1,024 tokens the distant mass leaves out the first 4 and the last 64 keys of each query, the vertical-slash budget is
31 columns + 190 lags, the A-shape budget 30 sink keys + a window of 50).

Writes ``shape_zoo.csv`` (``model, layer, head`` and every column of the measure, with ``sink_weight``),
``shape_zoo_summary.csv`` (per model: heads, distant-mass quantiles, the share of heads below each candidate
threshold, medians of entropy, coverage and the estimate's error, the scan's seconds) and ``shape_zoo.{html,png}``
(histogram of distant mass per model, the default threshold marked).

    python -m analyses.atlas.shape_zoo [--models ...] [--prompts 8] [--tokens 1024] [--quick] [--out DIR]
"""

from __future__ import annotations

import time

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import torch

import interp
from interp.measures.shape import STREAMING_THRESHOLD

from analyses._common import installed, parser, save_figure

CANDIDATES = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6)
QUANTILES = (0.1, 0.25, 0.5, 0.75, 0.9)
COLUMNS = ["entropy", "entropy_norm", "vertical_top_key", "vertical_top_key_weight", "vertical_top1pct", "ashape_coverage",
           "vs_coverage", "vs_est_coverage", "vs_picked_coverage", "vs_est_error", "distant_mass", "is_streaming", "sink_weight"]


def otsu(values: np.ndarray, bins: int = 200) -> float:
    """Otsu's threshold (Otsu 1979): the cut of ``values`` in [0, 1] that maximises the between-class variance of the two
    sides, on a histogram of ``bins`` bins; a training-free split of heads into two groups."""
    hist, edges = np.histogram(values, bins=bins, range=(0.0, 1.0))
    p = hist / hist.sum()
    mids = (edges[:-1] + edges[1:]) / 2
    w0 = np.cumsum(p)
    m0 = np.cumsum(p * mids)
    mt = m0[-1]
    with np.errstate(divide="ignore", invalid="ignore"):
        between = (mt * w0 - m0) ** 2 / (w0 * (1 - w0))
    between[~np.isfinite(between)] = -1
    return float(edges[1:][np.argmax(between)])


def summarise(model: str, heads: pd.DataFrame, seconds: float, n_prompts: int, n_tokens: int) -> dict:
    """One summary row: quantiles of distant mass, its Otsu threshold, share of heads under each candidate threshold,
    medians."""
    dm = heads["distant_mass"].to_numpy()
    out = {"model": model, "prompts": n_prompts, "tokens": n_tokens, "heads": len(heads), "seconds": round(seconds, 1),
           "otsu_threshold": otsu(dm)}
    out.update({f"distant_q{int(q * 100):02d}": float(np.quantile(dm, q)) for q in QUANTILES})
    out.update({f"share_below_{t:g}".replace(".", ""): float((dm < t).mean()) for t in CANDIDATES})
    out["streaming_share_default"] = float((dm < STREAMING_THRESHOLD).mean())
    for c in ("entropy_norm", "vertical_top1pct", "ashape_coverage", "vs_coverage", "vs_picked_coverage", "vs_est_error"):
        out[f"median_{c}"] = float(heads[c].median())
    out["mean_abs_vs_est_error"] = float(heads["vs_est_error"].abs().mean())
    out["max_abs_vs_est_error"] = float(heads["vs_est_error"].abs().max())
    return out


def figure(df: pd.DataFrame) -> go.Figure:
    fig = go.Figure()
    for name, d in df.groupby("model", sort=False):
        fig.add_trace(go.Histogram(x=d["distant_mass"], name=name, xbins=dict(start=0, end=1, size=0.025), opacity=0.6,
                                   histnorm="probability"))
    fig.add_vline(x=STREAMING_THRESHOLD, line_dash="dash", annotation_text=f"streaming_threshold {STREAMING_THRESHOLD:g}")
    fig.update_layout(barmode="overlay", template="plotly_white", width=900, height=450,
                      title="distant mass per head (share of attention outside the sink and recent keys), pydoc",
                      xaxis_title="distant mass", yaxis_title="share of heads")
    return fig


def main(argv: list[str] | None = None) -> pd.DataFrame:
    ap = parser(__doc__, "tiny-llama, 2 prompts x 96 tokens")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=1024)
    args = ap.parse_args(argv)
    if args.quick:
        args.models, args.prompts, args.tokens = ["tiny-llama"], 2, 96
    args.out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    rows, summary = [], []
    for name in installed(args.models):
        model = interp.load_model(name, device="cpu")
        prompts = interp.corpus.prompts(model, "pydoc", args.prompts, args.tokens)
        t0 = time.perf_counter()
        res = interp.scan(model, prompts, interp.ScanConfig(shape=True))
        seconds = time.perf_counter() - t0
        heads = res.heads[["layer", "head", *COLUMNS]].copy()
        heads.insert(0, "model", name)
        rows.append(heads)
        summary.append(summarise(name, heads, seconds, args.prompts, args.tokens))
        print(f"{name}: {seconds:.0f} s; distant mass quantiles "
              f"{[round(summary[-1][f'distant_q{int(q * 100):02d}'], 3) for q in QUANTILES]}", flush=True)
    df = pd.concat(rows, ignore_index=True)
    if len(summary) > 1:  # the zoo pooled: every head of every model once
        summary.append(summarise("zoo (pooled)", df, sum(r["seconds"] for r in summary), args.prompts, args.tokens))
    df.to_csv(args.out / "shape_zoo.csv", index=False, float_format="%.6g")
    pd.DataFrame(summary).to_csv(args.out / "shape_zoo_summary.csv", index=False, float_format="%.4g")
    save_figure(figure(df), args.out, "shape_zoo")
    return pd.DataFrame(summary)


if __name__ == "__main__":
    main()
