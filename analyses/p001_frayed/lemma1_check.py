"""Paper 001 Lemma 1 and Theorem 1 on the zoo models: predicted against measured post/pre-RoPE ratios.

For each installed model and prompt length n (default 256, 512, 1024, 2048 tokens, pydoc prompts), one
``interp.scan``; per query head and per key (kv) head, from the scan's Gram matrices summed over tokens
(``interp.measures.spectrum.gram_matrices``, ``ScanResult.heads``):

- measured: FSV ratio ``||R(X)||_2 / ||X||_2`` and stable-rank ratio ``srank(R(X)) / srank(X)``;
- Lemma 1 / Theorem 1 (n -> inf, X = u v^T): ``(1/sqrt 2) max_k alpha_k`` and ``2 / max_k alpha_k^2``, alpha_k the
  norm of the top right singular vector of the pre-RoPE X in rotation plane k (model pairing;
  ``spectrum.fsv_prediction``, ``spectrum.srank_prediction``);
- the same rank-1 model at the measured n (``interp.rope.clouds.rank1_rotated_gram``: X = 1_n v^T rotated by the
  layer's own frequencies at positions 0..n-1), which separates the two assumptions of the lemma: the
  n -> inf limit (slow planes have not turned at n = 2048) and the rank-1 cloud (r1 = share of the top
  singular value's energy, column ``r1_pre``); also at n = 32768 and n = 2**30 (closed form), to see how
  long the lemma's limit takes with the models' own frequencies.

Writes into ``--out`` (default ``figures/``): ``lemma1_heads.csv`` (every head and length),
``lemma1_summary.csv`` (per model, layer type, q/k, n), ``lemma1_scatter.png/.html`` (measured vs Lemma 1 /
Theorem 1) and ``lemma1_scatter_finite_n.png/.html`` (measured vs the rank-1 model at the measured n).

    python -m analyses.p001_frayed.lemma1_check [--quick] [--lengths 256 512 1024 2048] [--prompts 1] [--models ...] [--out figures]
"""

from __future__ import annotations

import math
import time

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import torch
from plotly.colors import qualitative
from plotly.subplots import make_subplots

import interp
from interp.measures import spectrum
from interp.models.arch import rope_specs
from interp.rope.clouds import rank1_rotated_gram

from analyses._common import installed, one_thread, parser, save_figure

LONG, HUGE = 32768, 2**30  # the rank-1 model also at a long context and near n -> inf (closed form, any n)




def layer_type(model, layer: int) -> str:
    """``"sliding"`` / ``"global"`` for models with both kinds of layer (Gemma-3: bases 1e4 / 1e6), else ``"all"``."""
    w = model.card.sliding_window
    if all(x is None for x in w) or all(x is not None for x in w):
        return "all"
    return "sliding" if w[layer] is not None else "global"


def head_rows(model, res: interp.ScanResult, n: int) -> pd.DataFrame:
    """One row per (layer, q head) and (layer, kv head): measured and predicted ratios at length n."""
    card, heads = model.card, res.heads
    specs = rope_specs(model.hf)
    rows = []
    for kind in ("q", "k"):
        G_pre, G_rot = spectrum.gram_matrices(res, kind)
        pre, rot = spectrum.spectrum_metrics(G_pre), spectrum.spectrum_metrics(G_rot)
        fsv_pred, srank_pred = spectrum.fsv_prediction(G_pre, card.pairing), spectrum.srank_prediction(G_pre, card.pairing)
        top = torch.linalg.eigh(G_pre)[1][..., -1]  # [layer, head, d] top right singular vector of pre-RoPE X
        for layer in range(card.n_layers):
            for h in range(G_pre.shape[1]):
                lam, lam_32k, lam_inf = (float(torch.linalg.eigvalsh(rank1_rotated_gram(top[layer, h], specs[layer].inv_freq, m, card.pairing))[-1])
                                         for m in (n, LONG, HUGE))  # ||v|| = 1: trace m
                rows.append({"model": card.name, "layer_type": layer_type(model, layer), "layer": layer, "kind": kind, "head": h, "n": n,
                             "r1_pre": float(pre["r1"][layer, h]),
                             "fsv_measured": float(rot["spec_norm"][layer, h] / pre["spec_norm"][layer, h]),
                             "fsv_lemma1": float(fsv_pred[layer, h]), "fsv_rank1_n": math.sqrt(lam / n),
                             "fsv_rank1_32k": math.sqrt(lam_32k / LONG), "fsv_rank1_2^30": math.sqrt(lam_inf / HUGE),
                             "srank_measured": float(rot["srank"][layer, h] / pre["srank"][layer, h]),
                             "srank_theorem1": float(srank_pred[layer, h]), "srank_rank1_n": n / lam})
    df = pd.DataFrame(rows)
    # the public per-head table must agree with the recomputation (k rows: the first query head of each group)
    g = card.group_size
    q, k = df[df["kind"] == "q"], df[df["kind"] == "k"]
    np.testing.assert_allclose(q["fsv_measured"], heads["fsv_ratio_q"], rtol=1e-9)
    np.testing.assert_allclose(q["fsv_lemma1"], heads["fsv_lemma1_q"], rtol=1e-9)
    first = heads[heads["head"] % g == 0]
    np.testing.assert_allclose(k["fsv_measured"], first["fsv_ratio_k"], rtol=1e-9)
    np.testing.assert_allclose(k["srank_measured"], first["srank_k_rot"] / first["srank_k_pre"], rtol=1e-9)
    return df


def run_model(name: str, lengths: list[int], n_prompts: int) -> tuple[pd.DataFrame, dict]:
    model = interp.load_model(name, device="cpu")
    frames, secs = [], {}
    for n in lengths:
        prompts = interp.corpus.prompts(model, "pydoc", n_prompts, n)
        t0 = time.perf_counter()
        res = interp.scan(model, prompts, interp.ScanConfig(counterfactual_sinks=False), meta={"corpus": "pydoc"})
        secs[n] = time.perf_counter() - t0
        with one_thread():
            frames.append(head_rows(model, res, n))
    return pd.concat(frames, ignore_index=True), secs


def _corr(a: pd.Series, b: pd.Series) -> float:
    return float(np.corrcoef(a, b)[0, 1]) if len(a) > 2 and a.std() > 0 and b.std() > 0 else float("nan")


def summarise(df: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for (m, t, kind, n), g in df.groupby(["model", "layer_type", "kind", "n"], sort=False):
        r1 = g[g["r1_pre"] >= 0.9]  # nearly rank 1: Lemma 1's assumption holds best
        rows.append({
            "model": m, "layer_type": t, "kind": kind, "n": n, "heads": len(g),
            "fsv_measured_med": g["fsv_measured"].median(), "fsv_lemma1_med": g["fsv_lemma1"].median(), "fsv_rank1_n_med": g["fsv_rank1_n"].median(),
            "fsv_rank1_32k_med": g["fsv_rank1_32k"].median(), "fsv_rank1_2^30_med": g["fsv_rank1_2^30"].median(),
            "fsv_corr_lemma1": _corr(g["fsv_lemma1"], g["fsv_measured"]), "fsv_corr_rank1_n": _corr(g["fsv_rank1_n"], g["fsv_measured"]),
            "fsv_frac_above_lemma1": float((g["fsv_measured"] > g["fsv_lemma1"]).mean()),
            "fsv_med_abs_err_rank1_n": float((g["fsv_measured"] - g["fsv_rank1_n"]).abs().median()),
            "srank_measured_med": g["srank_measured"].median(), "srank_theorem1_med": g["srank_theorem1"].median(),
            "srank_rank1_n_med": g["srank_rank1_n"].median(),
            "srank_corr_theorem1": _corr(g["srank_theorem1"], g["srank_measured"]), "srank_corr_rank1_n": _corr(g["srank_rank1_n"], g["srank_measured"]),
            "rank1_heads": len(r1), "fsv_med_abs_err_rank1_n_rank1_heads": float((r1["fsv_measured"] - r1["fsv_rank1_n"]).abs().median()) if len(r1) else float("nan"),
        })
    return pd.DataFrame(rows)


def scatter(df: pd.DataFrame, finite_n: bool) -> go.Figure:
    fx, sx = ("fsv_rank1_n", "srank_rank1_n") if finite_n else ("fsv_lemma1", "srank_theorem1")
    groups = [(m, t) for (m, t), _ in df.groupby(["model", "layer_type"], sort=False)]
    titles = [m if t == "all" else f"{m} ({t})" for m, t in groups]
    fig = make_subplots(rows=2, cols=len(groups), subplot_titles=titles, vertical_spacing=0.1, horizontal_spacing=0.05)
    ns = sorted(df["n"].unique())
    for j, (m, t) in enumerate(groups, start=1):
        g = df[(df["model"] == m) & (df["layer_type"] == t)]
        for i, n in enumerate(ns):
            for kind, symbol in (("q", "circle"), ("k", "x")):
                s = g[(g["n"] == n) & (g["kind"] == kind)]
                style = dict(color=qualitative.D3[i % 10], symbol=symbol, size=5, opacity=0.6)
                name = f"n = {n}, {'queries' if kind == 'q' else 'keys'}"
                fig.add_trace(go.Scatter(x=s[fx], y=s["fsv_measured"], mode="markers", marker=style, name=name, legendgroup=name,
                                         showlegend=j == 1), row=1, col=j)
                fig.add_trace(go.Scatter(x=s[sx], y=s["srank_measured"], mode="markers", marker=style, name=name, legendgroup=name,
                                         showlegend=False), row=2, col=j)
        lo, hi = min(g[fx].min(), g["fsv_measured"].min()), 1.0
        fig.add_trace(go.Scatter(x=[lo, hi], y=[lo, hi], mode="lines", line=dict(color="grey", dash="dot"), showlegend=False), row=1, col=j)
        lo, hi = 1.0, max(g[sx].max(), g["srank_measured"].max())
        fig.add_trace(go.Scatter(x=[lo, hi], y=[lo, hi], mode="lines", line=dict(color="grey", dash="dot"), showlegend=False), row=2, col=j)
        fig.update_xaxes(type="log", row=2, col=j)
        fig.update_yaxes(type="log", row=2, col=j)
    what = "rank-1 model X = 1 v<sup>T</sup> at the measured n" if finite_n else "Lemma 1 / Theorem 1 (n -> inf)"
    fig.update_xaxes(title=f"predicted FSV ratio ({'rank 1, n' if finite_n else 'max alpha / sqrt 2'})", row=1)
    fig.update_xaxes(title=f"predicted srank ratio ({'rank 1, n' if finite_n else '2 / max alpha^2'})", row=2)
    fig.update_yaxes(title="measured FSV ratio", row=1, col=1)
    fig.update_yaxes(title="measured srank ratio", row=2, col=1)
    fig.update_layout(title=f"Paper 001: measured post/pre-RoPE ratios vs {what}; dotted: y = x", width=max(900, 330 * len(groups) + 260), height=760)
    return fig




def main(argv: list[str] | None = None) -> dict:
    ap = parser(__doc__, "smollm2-135m only, 1 prompt of 128 and 256 tokens (for tests)")
    ap.add_argument("--lengths", type=int, nargs="+", default=[256, 512, 1024, 2048])
    ap.add_argument("--prompts", type=int, default=1, help="prompts per length (Grams summed over them)")
    args = ap.parse_args(argv)
    if args.quick:
        args.models, args.lengths, args.prompts = ["smollm2-135m"], [128, 256], 1
    args.out.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()
    frames = []
    for name in installed(args.models):
        df, secs = run_model(name, sorted(args.lengths), args.prompts)
        frames.append(df)
        print(f"{name}: scans {', '.join(f'{n} tok {s:.0f} s' for n, s in secs.items())} ({args.prompts} prompt(s) each)", flush=True)
    if not frames:
        raise SystemExit("no model installed")
    df = pd.concat(frames, ignore_index=True)
    df.to_csv(args.out / "lemma1_heads.csv", index=False)
    summ = summarise(df)
    summ.to_csv(args.out / "lemma1_summary.csv", index=False)
    short = {"fsv_measured_med": "fsv_meas", "fsv_lemma1_med": "fsv_L1", "fsv_rank1_n_med": "fsv_r1@n",
             "fsv_rank1_32k_med": "fsv_r1@32k", "fsv_rank1_2^30_med": "fsv_r1@2^30", "fsv_corr_lemma1": "corr_L1", "fsv_corr_rank1_n": "corr_r1@n",
             "srank_measured_med": "srank_meas", "srank_theorem1_med": "srank_T1", "srank_rank1_n_med": "srank_r1@n", "srank_corr_rank1_n": "s_corr_r1@n"}
    print("\nMedians over heads (meas = measured; L1/T1 = Lemma 1 / Theorem 1, n -> inf; r1@n = rank-1 model at length n); "
          "corr = Pearson over heads")
    table = summ[["model", "layer_type", "kind", "n", "heads", *short]].rename(columns={**short, "layer_type": "layers"})
    table["model"] = table["model"].str.split("-").str[0]
    with pd.option_context("display.width", 250, "display.max_columns", 30):
        print(table.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    err = (df["fsv_measured"] - df["fsv_rank1_n"]).abs()
    print(f"|measured - rank-1 model at n| FSV ratio: median {err.median():.4f}, 95th percentile {err.quantile(0.95):.4f}, max {err.max():.4f} "
          f"over {len(df)} (head, n); measured > Lemma 1 in {(df['fsv_measured'] > df['fsv_lemma1']).mean():.1%}")
    lemma2 = float((df["srank_measured"] * df["fsv_measured"] ** 2 - 1).abs().max())
    print(f"Lemma 2 (RoPE keeps ||X||_F): srank ratio = 1 / FSV ratio^2 for every head, max |srank * fsv^2 - 1| = {lemma2:.1e}")
    figs = {"scatter": save_figure(scatter(df, finite_n=False), args.out, "lemma1_scatter"),
            "scatter_finite_n": save_figure(scatter(df, finite_n=True), args.out, "lemma1_scatter_finite_n")}
    print(f"\nwrote {args.out}/lemma1_* in {time.perf_counter() - t_start:.0f} s")
    return {"heads": df, "summary": summ, "figures": figs}


if __name__ == "__main__":
    main()
