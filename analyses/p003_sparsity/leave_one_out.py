"""Paper 003 Fig. 2 / App. F on a real model: do k = 5 leave-one-out influential far tokens recover the far context?

For each of ``--examples`` pydoc windows of ``L_bar = 128`` tokens (``interp.corpus.prompts``, seeded; BOS in
front where the model adds one, never removed), ``interp.lab.influence.far_token_losses`` finds the ``k = 5`` far
tokens ``X_j, j in [L_bar - L - 1]`` (63 candidates) whose removal from every attention computation (positions
unchanged) most LOWERS the probability of the last token (003 App. F, eq. 22, an argmin), then scores the last
token with the model ``smollm2-135m`` (default) under four masks:

- ``l_long``: all 127 context tokens;  ``l_short``: only the ``L = 64`` most recent ones;
- ``l_short_sparse``: the 64 recent ones plus ``X_J1..X_J5``;  ``l_short_random``: plus 5 random far tokens (control);
- ``l_short_first``: plus ``X_1`` alone (control, not in the paper: without BOS, ``X_1`` is the attention sink).

Writes ``figures/loo.csv`` (one row per example; ``J`` and ``random`` are the paper's 1-based indices of ``X``),
``figures/loo_summary.csv`` (means, correlations; 95% percentile bootstrap intervals over the windows, 10000
resamples, numpy seed 0, in ``*_lo`` / ``*_hi`` columns for ``pearson_sparse``, ``pearson_random``, the difference
``pearson_sparse - pearson_random`` (paired: the same windows) and ``recovered_sparse``; ``pearson_sparse_wo_max``:
Pearson without the window of largest ``gain_sparse``) and ``figures/loo_fig2.png`` (+ ``.html``): the scatter of 003
Fig. 2 with App. F's axes, x = ``L_short - L_long`` (gain from all far tokens), y = ``L_short - L_short,sparse``
(gain from the 5 influential ones), grey: y = ``L_short - L_short,random``. Note smollm2 was trained on long
contexts (like the paper's h_long, Fig. 7a), not at context 64 with PoSE (the paper's h_short, Fig. 2).

    python -m analyses.p003_sparsity.leave_one_out [--examples 32] [--seed 0] [--device cpu] [--threads N] [--quick] [--out figures]
    python -m analyses.p003_sparsity.leave_one_out --from-table figures/loo.csv   # only the summary (and figure) from a saved loo.csv
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import torch

import interp
from interp.lab.influence import far_token_losses

from analyses._common import parser, save_figure


BOOT = 10000


def bootstrap(df: pd.DataFrame, reps: int = BOOT, seed: int = 0) -> dict[str, float]:
    """95% percentile intervals over windows (resampled with replacement, the same draws for every statistic)."""
    x, y, yr = (df[c].to_numpy() for c in ("gain_all", "gain_sparse", "gain_random"))
    idx = np.random.default_rng(seed).integers(0, len(df), size=(reps, len(df)))

    def corr(a, b):
        a, b = a - a.mean(1, keepdims=True), b - b.mean(1, keepdims=True)
        with np.errstate(invalid="ignore", divide="ignore"):
            return (a * b).sum(1) / np.sqrt((a**2).sum(1) * (b**2).sum(1))

    xs, ys, yrs = x[idx], y[idx], yr[idx]
    with np.errstate(invalid="ignore", divide="ignore"):
        reps_ = {"pearson_sparse": corr(xs, ys), "pearson_random": corr(xs, yrs), "pearson_diff": corr(xs, ys) - corr(xs, yrs),
                 "recovered_sparse": ys.mean(1) / xs.mean(1)}
    out = {}
    for k, v in reps_.items():
        out[f"{k}_lo"], out[f"{k}_hi"] = (float(q) for q in np.nanpercentile(v, [2.5, 97.5]))
    return out


def summarise(df: pd.DataFrame) -> pd.DataFrame:
    """One row: mean losses (nats), mean gains, Pearson / Spearman correlations of the Fig. 2 scatter and the
    fraction of the far-token gain the 5 chosen (or random) tokens recover (ratio of mean gains), with bootstrap
    intervals over the windows (``bootstrap``) and the Pearson correlation without the window of largest y."""
    x, y, yr = df["gain_all"], df["gain_sparse"], df["gain_random"]
    s = {"examples": len(df)}
    s.update({f"mean_{c}": df[c].mean() for c in ["l_short", "l_long", "l_short_sparse", "l_short_random", "l_short_first"]})
    s.update({"mean_gain_all": x.mean(), "mean_gain_sparse": y.mean(), "mean_gain_random": yr.mean(),
              "mean_gain_first": df["gain_first"].mean(), "recovered_first": df["gain_first"].mean() / x.mean(),
              "pearson_sparse": x.corr(y), "spearman_sparse": x.corr(y, method="spearman"),
              "pearson_random": x.corr(yr), "spearman_random": x.corr(yr, method="spearman"),
              "recovered_sparse": y.mean() / x.mean(), "recovered_random": yr.mean() / x.mean(),
              "median_abs_y_minus_x": (y - x).abs().median(),
              "frac_sparse_beats_long": float((df["l_short_sparse"] < df["l_long"]).mean()),
              "frac_J_has_X1": float(df["J"].map(lambda s: 1 in [int(v) for v in s.split(";")]).mean())})
    s["pearson_diff"] = s["pearson_sparse"] - s["pearson_random"]
    keep = y != y.max()
    s["pearson_sparse_wo_max"] = x[keep].corr(y[keep])
    s.update(bootstrap(df))
    return pd.DataFrame([s])


def figure(df: pd.DataFrame, s: pd.Series, name: str, lbar: int, L: int, k: int) -> go.Figure:
    lo = float(min(df[["gain_all", "gain_sparse", "gain_random"]].min().min(), 0)) - 0.1
    hi = float(max(df[["gain_all", "gain_sparse", "gain_random"]].max().max(), 0)) + 0.1
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=[lo, hi], y=[lo, hi], mode="lines", line=dict(color="#888", dash="dot"), name="x = y"))
    fig.add_trace(go.Scatter(x=df["gain_all"], y=df["gain_random"], mode="markers", name=f"{k} random far tokens",
                             marker=dict(color="#aaa", size=6)))
    fig.add_trace(go.Scatter(x=df["gain_all"], y=df["gain_sparse"], mode="markers", name=f"{k} influential far tokens",
                             marker=dict(color="#1f77b4", size=7)))
    fig.update_layout(
        title=(f"{name}: 003 Fig. 2 analogue, L_bar={lbar}, L={L}, k={k}, {len(df)} pydoc windows<br>"
               f"<sup>Pearson r = {s.pearson_sparse:.2f}, Spearman {s.spearman_sparse:.2f} "
               f"(random: {s.pearson_random:.2f}, {s.spearman_random:.2f}); "
               f"mean gain recovered {s.recovered_sparse:.0%} (random: {s.recovered_random:.0%})</sup>"),
        xaxis_title=f"L_short - L_long  (all {lbar - L - 1} far tokens, nats)",
        yaxis_title=f"L_short - L_short,sparse  ({k} far tokens, nats)", width=720, height=640)
    fig.update_xaxes(range=[lo, hi])
    fig.update_yaxes(range=[lo, hi], scaleanchor="x")
    return fig


def run_model(name: str, n: int, lbar: int, L: int, k: int, seed: int, device: str, batch_size: int) -> pd.DataFrame:
    model = interp.load_model(name, device=device)
    n_bos = int(model.bos_token_id is not None)
    windows = interp.corpus.prompts(model, "pydoc", n, lbar + n_bos, seed).to(model.device)
    rng = np.random.default_rng(seed)  # draws the random-control tokens, example after example
    rows = []
    t0 = time.perf_counter()
    for i, w in enumerate(windows):
        r = far_token_losses(model.hf, w, L, k, n_bos=n_bos, rng=rng, batch_size=batch_size)
        rows.append({"model": name, "example": i, "l_short": r.l_short, "l_long": r.l_long, "l_short_sparse": r.l_short_sparse,
                     "l_short_random": r.l_short_random, "l_short_first": r.l_short_first, "J": ";".join(str(j - n_bos + 1) for j in r.J),
                     "random": ";".join(str(j - n_bos + 1) for j in r.random),
                     "loo_min_drop": float(-r.loo_logprobs.min() - r.l_long)})  # largest single-token effect (nats)
        if (i + 1) % 10 == 0 or i + 1 == n:
            print(f"  {name}: {i + 1}/{n} windows, {time.perf_counter() - t0:.0f} s", flush=True)
    df = pd.DataFrame(rows)
    df["gain_all"] = df["l_short"] - df["l_long"]
    df["gain_sparse"] = df["l_short"] - df["l_short_sparse"]
    df["gain_random"] = df["l_short"] - df["l_short_random"]
    df["gain_first"] = df["l_short"] - df["l_short_first"]
    return df


def main(argv: list[str] | None = None) -> pd.DataFrame:
    ap = parser(__doc__, "tiny-llama, 3 windows of L_bar=32, L=16, k=3")
    ap.set_defaults(models=["smollm2-135m"])
    ap.add_argument("--examples", type=int, default=32, help="pydoc windows (the paper used 500 C4 sequences)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lbar", type=int, default=128)
    ap.add_argument("--L", type=int, default=64)
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--batch-size", type=int, default=8, help="rows per leave-one-out forward")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    ap.add_argument("--from-table", type=Path, default=None, help="summarise a saved loo.csv (no model run); keeps the "
                    "run time of the loo_summary.csv beside it")
    args = ap.parse_args(argv)
    if args.from_table is not None:
        return from_table(args.from_table, args.out, args.lbar, args.L, args.k)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.quick:
        args.models, args.examples, args.lbar, args.L, args.k = ["tiny-llama"], 3, 32, 16, 3
    args.out.mkdir(parents=True, exist_ok=True)
    frames, sums = [], []
    for name in args.models:
        t0 = time.perf_counter()
        df = run_model(name, args.examples, args.lbar, args.L, args.k, args.seed, args.device, args.batch_size)
        s = summarise(df).assign(model=name, seconds=time.perf_counter() - t0)
        frames.append(df)
        sums.append(s)
        save_figure(figure(df, s.iloc[0], name, args.lbar, args.L, args.k), args.out, "loo_fig2" if len(args.models) == 1 else f"loo_fig2_{name}")
        with pd.option_context("display.width", 200, "display.max_columns", 30, "display.float_format", "{:.3f}".format):
            print(s.T.to_string(header=False))
    df, summary = pd.concat(frames, ignore_index=True), pd.concat(sums, ignore_index=True)
    df.to_csv(args.out / "loo.csv", index=False)
    summary.to_csv(args.out / "loo_summary.csv", index=False)
    return df


def from_table(path: Path, out: Path, lbar: int, L: int, k: int) -> pd.DataFrame:
    """Rewrite ``loo_summary.csv`` (and the figure) in ``out`` from a saved ``loo.csv``, one model at a time."""
    df = pd.read_csv(path)
    old = path.with_name("loo_summary.csv")
    seconds = pd.read_csv(old).set_index("model")["seconds"].to_dict() if old.exists() else {}
    out.mkdir(parents=True, exist_ok=True)
    sums = []
    for name, d in df.groupby("model", sort=False):
        s = summarise(d.reset_index(drop=True)).assign(model=name, seconds=seconds.get(name, np.nan))
        sums.append(s)
        save_figure(figure(d, s.iloc[0], name, lbar, L, k), out, "loo_fig2" if df["model"].nunique() == 1 else f"loo_fig2_{name}")
    pd.concat(sums, ignore_index=True).to_csv(out / "loo_summary.csv", index=False)
    return df


if __name__ == "__main__":
    torch.set_grad_enabled(False)
    main()
