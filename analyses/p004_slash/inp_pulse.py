"""Paper 004 Fig. 7 (InP heatmap of one query) and Fig. 23 (pulse check) on the zoo models.

For each installed model: one scan of pydoc prompts with the per-plane InP sums (``ScanConfig(inp=True)``),
then

- ``figures/inp_fig7.png`` (+ ``.html``): for the top slash-dominant head of each model, InP(i, j, l) for the
  query i = 63 over keys j = 0..63 and planes l (mean over the prompts; the paper shows one prompt and
  i = 100), keys x planes as in 004 Fig. 7;
- ``figures/pulse_check.csv``: for every SDH, its active planes (mean |InP| >= 0.1 x max, and the same rule
  on the signed mean), how many fall in each band, and where the pulse P(x) = sum over active planes of
  cos(theta_l x) peaks for x in 1..64; ``hit_*`` says whether it peaks at the head's lag (heads with lag >= 1;
  at x = 0 every pulse is maximal, so lag-0 heads are not scored); ``*_random``: the same number of planes drawn
  at random (seeded), the baseline: P(x) falls from x = 0 for most plane sets, so lag 1 is an easy hit;
- ``figures/pulse_fig23.png``: P(x) of the top SDHs with lag >= 1, their lag marked;
- in ``pulse_check.csv`` also 004 Assumption 4.1 as the paper states it (issue 33): P(x) / P(0) over every offset
  1 <= x <= N (N = ``--tokens``) should be a flat floor C2 with a spike at 0; ``a41_spike_*`` = 1 - C2 (C2 the
  median over x) and ``a41_dev_*`` = max |P(x) / P(0) - C2| for the |InP| rule, the signed rule and the random planes;
- ``figures/pulse_a41.csv``: the same statistics with 95% bootstrap intervals over prompts (each prompt scanned alone,
  ``--boot`` resamples; per resample every SDH's active planes are recomputed from the resampled InP means): per model
  and rule the median over SDHs of the spike, of the deviation and of their ratio dev / spike (the pulse is the
  flat-floor pulse of Assumption 4.1 when the ratio is well below 1), the SDH set fixed to the full sample's.

    python -m analyses.p004_slash.inp_pulse [--prompts 8] [--tokens 1024] [--boot 1000] [--quick] [--out figures]
"""

from __future__ import annotations

import time

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots

import interp
from interp.measures import inp as freq
from interp.measures.inp import layer_inv_freq

from analyses._common import installed, parser, save_figure
from analyses.p004_slash.band_ablation import boot_index, interval
from analyses.p004_slash.sdh_count_bootstrap import per_prompt_scans

X_MAX = 64


def offset0_pulse(inv_freq: torch.Tensor, active: torch.Tensor, n: int) -> tuple[float, float]:
    """004 Assumption 4.1 as stated: P(x) = sum over the active planes of cos(theta_l x) should approximate
    C1 delta_0(x) + C2 for every 1 <= |x| <= N. Returns ``(spike, dev)`` in units of P(0) = the number of active
    planes: ``spike = 1 - C2`` with C2 the median of P(x) / P(0) over x = 1..n (the height of the pulse above the
    floor), and ``dev`` the largest |P(x) / P(0) - C2| over x = 1..n (the assumption's tolerance, relative).
    Both are nan when no plane is active. No threshold is applied: 004 asks only for a "sufficiently small" tolerance."""
    if not bool(active.any()):
        return float("nan"), float("nan")
    x = torch.arange(1, n + 1, dtype=torch.float64)
    p = freq.pulse(inv_freq, active, x) / float(active.sum())
    c2 = float(p.median())
    return 1.0 - c2, float((p - c2).abs().max())


def pulse_table(name: str, res: interp.ScanResult, n_tokens: int = 1024) -> pd.DataFrame:
    """One row per SDH: active planes (|InP| and signed rules), band counts, pulse peak and whether it hits the lag
    (the own-lag variant), and 004 Assumption 4.1 as stated (the offset-0 pulse over |x| <= ``n_tokens``:
    ``a41_spike_*``, ``a41_dev_*``, see :func:`offset0_pulse`) for both rules and the random planes."""
    heads = res.heads
    mean_s, mean_a = freq.means(res)
    inv = layer_inv_freq(res).float()
    windows = res.card.sliding_window
    rows = []
    gen = torch.Generator().manual_seed(0)
    for r in heads[heads["is_sdh"]].itertuples():
        act_a, act_s = freq.active_planes(mean_a[r.layer, r.head]), freq.active_planes(mean_s[r.layer, r.head])
        # baseline: as many planes, drawn at random; P(x) falls from x = 0 for most plane sets, so lag 1 is an easy hit
        rand = torch.zeros_like(act_a)
        rand[torch.randperm(rand.numel(), generator=gen)[: int(act_a.sum())]] = True
        peak_r = freq.pulse_peak(inv[r.layer], rand, X_MAX)
        peak_a = freq.pulse_peak(inv[r.layer], act_a, X_MAX)
        peak_s = freq.pulse_peak(inv[r.layer], act_s, X_MAX)
        d = int(r.slash_delta)
        bands = freq.band_counts(act_a)
        rows.append({"model": name, "layer_type": "all" if all(w is None for w in windows) or all(w is not None for w in windows)
                     else ("sliding" if windows[r.layer] is not None else "global"),
                     "layer": r.layer, "head": r.head, "lag": d, "slash_score": r.slash_score,
                     "n_active_abs": int(act_a.sum()), "active_high": bands["high"], "active_medium": bands["medium"], "active_low": bands["low"],
                     "peak_abs": peak_a, "n_active_signed": int(act_s.sum()), "peak_signed": peak_s,
                     "peak_random": peak_r, "hit_abs": (peak_a == d) if d >= 1 else np.nan,
                     "hit_signed": (peak_s == d) if d >= 1 else np.nan, "hit_random": (peak_r == d) if d >= 1 else np.nan,
                     **{f"a41_{k}_{rule}": v for rule, act in (("abs", act_a), ("signed", act_s), ("random", rand))
                        for k, v in zip(("spike", "dev"), offset0_pulse(inv[r.layer], act, n_tokens))}})
    return pd.DataFrame(rows)


def a41_statistics(inv: torch.Tensor, layers: torch.Tensor, active: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`offset0_pulse` for many heads at once: ``inv [layer, freq]`` inverse frequencies, ``layers [S]`` each
    head's layer, ``active [S, freq]`` bool -> ``(spike [S], dev [S])`` float64, nan where no plane is active."""
    x = torch.arange(1, n + 1, dtype=torch.float64)
    cos = torch.cos(inv.double()[layers][:, :, None] * x)  # [S, freq, x]
    n_act = active.sum(-1, keepdim=True).double()
    p = (active.double()[:, :, None] * cos).sum(1) / n_act  # [S, x]: P(x) / P(0)
    c2 = p.median(-1).values
    spike, dev = 1.0 - c2, (p - c2[:, None]).abs().amax(-1)
    none = n_act[:, 0] == 0
    return spike.masked_fill(none, float("nan")), dev.masked_fill(none, float("nan"))


def a41_boot(name: str, res: interp.ScanResult, per: dict[str, np.ndarray], n_tokens: int, reps: int) -> pd.DataFrame:
    """Assumption 4.1 as stated with 95% bootstrap intervals over prompts (module docstring): one row per rule (abs,
    signed). ``per``: per-prompt InP sums ``inp_signed`` / ``inp_abs [prompt, layer, head, freq]``, ``inp_pairs``
    ``[prompt, layer, head]`` (``sdh_count_bootstrap.per_prompt_scans``); ``res``: the merged scan (its SDHs)."""
    heads = res.heads[res.heads["is_sdh"]]
    L, H = torch.tensor(heads["layer"].tolist(), dtype=torch.long), torch.tensor(heads["head"].tolist(), dtype=torch.long)
    inv = layer_inv_freq(res).float()
    idx = boot_index(per["inp_pairs"].shape[0], reps)
    w = np.stack([np.bincount(i, minlength=per["inp_pairs"].shape[0]) for i in idx]).astype(np.float64)  # [reps, prompt]
    full = np.ones((1, w.shape[1]))
    rows = []
    for rule in ("abs", "signed"):
        stats = {}
        for tag, ws in (("point", full), ("boot", w)):
            out = []
            for wr in ws:
                pairs = torch.as_tensor(np.tensordot(wr, per["inp_pairs"], 1))[L, H]  # [S]
                mean = torch.as_tensor(np.tensordot(wr, per[f"inp_{rule}"], 1))[L, H] / pairs[:, None]
                spike, dev = a41_statistics(inv, L, freq.active_planes(mean), n_tokens)
                out.append([float(np.nanmedian(spike)), float(np.nanmedian(dev)), float(np.nanmedian(dev / spike))])
            stats[tag] = np.array(out)
        row = {"model": name, "rule": rule, "sdhs": len(heads), "boot": reps}
        for j, col in enumerate(("spike", "dev", "ratio")):
            row[f"{col}_median"] = stats["point"][0, j]
            row[f"{col}_lo"], row[f"{col}_hi"] = interval(stats["boot"][:, j])
        rows.append(row)
    return pd.DataFrame(rows)


def fig7(panels: list[tuple[str, np.ndarray]]) -> go.Figure:
    fig = make_subplots(rows=1, cols=len(panels), subplot_titles=[t for t, _ in panels])
    for c, (_, z) in enumerate(panels, start=1):  # each panel over its own max |InP|: models' logit scales differ
        fig.add_trace(go.Heatmap(z=z / max(np.abs(z).max(), 1e-30), coloraxis="coloraxis", customdata=z,
                                 hovertemplate="key %{y} plane %{x}: InP %{customdata:.3f}<extra></extra>"), row=1, col=c)
        fig.update_xaxes(title_text="plane (0 = highest frequency)", row=1, col=c)
        fig.update_yaxes(autorange="reversed", row=1, col=c)
    fig.update_yaxes(title_text="key position j", col=1)
    fig.update_layout(coloraxis=dict(colorscale="RdBu", cmin=-1, cmax=1, colorbar=dict(title="InP / max |InP|")),
                      title="InP(i = 63, j, l) of the top SDH of each model (mean over prompts; analogue of paper 004 Fig. 7)",
                      height=520, width=420 * len(panels))
    return fig


def fig23(curves: list[tuple[str, np.ndarray, int]]) -> go.Figure:
    fig = go.Figure()
    x = np.arange(0, X_MAX + 1)
    for label, P, lag in curves:
        fig.add_trace(go.Scatter(x=x, y=P / max(P[0], 1e-30), mode="lines", name=f"{label} (lag {lag})"))
    fig.update_layout(title="Pulse check: sum over active planes of cos(theta_l x), normalised by P(0) (analogue of 004 Fig. 23)",
                      xaxis_title="x (positions)", yaxis_title="P(x) / P(0)", height=440, width=980)
    return fig


def main(argv: list[str] | None = None) -> dict:
    ap = parser(__doc__, "smollm2-135m only, 2 prompts x 256 tokens (for tests)")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=1024)
    ap.add_argument("--boot", type=int, default=1000, help="prompt resamples for the Assumption 4.1 intervals")
    args = ap.parse_args(argv)
    if args.quick:
        args.models, args.prompts, args.tokens, args.boot = ["smollm2-135m"], 2, 256, 50
    args.out.mkdir(parents=True, exist_ok=True)
    tables, panels, curves, a41 = [], [], [], []
    for name in installed(args.models):
        model = interp.load_model(name, device="cpu")
        t0 = time.perf_counter()
        per, res = per_prompt_scans(model, interp.corpus.prompts(model, "pydoc", args.prompts, args.tokens), interp.ScanConfig(inp=True))
        t = pulse_table(name, res, args.tokens)
        tables.append(t)
        a41.append(a41_boot(name, res, per, args.tokens, args.boot))
        if len(t):
            top = next(t.sort_values("slash_score", ascending=False).itertuples())
            panels.append((f"{name} L{top.layer}H{top.head} (lag {top.lag})", res.inp_query_map()[top.layer, top.head].numpy()))
            inv = layer_inv_freq(res).float()
            _, mean_a = freq.means(res)
            for r in t[t["lag"] >= 1].sort_values("slash_score", ascending=False).head(2).itertuples():
                P = freq.pulse(inv[r.layer], freq.active_planes(mean_a[r.layer, r.head]), torch.arange(0, X_MAX + 1, dtype=torch.float64))
                curves.append((f"{name} L{r.layer}H{r.head}", P.numpy(), r.lag))
        scored, far = t[t["lag"] >= 1], t[t["lag"] >= 2]
        print(f"{name}: {len(t)} SDHs ({len(scored)} with lag >= 1, {len(far)} with lag >= 2) in {time.perf_counter() - t0:.1f} s; "
              f"pulse peaks at the lag (lag >= 1 / lag >= 2): |InP| rule {scored['hit_abs'].mean():.0%} / {far['hit_abs'].mean():.0%}, "
              f"signed rule {scored['hit_signed'].mean():.0%} / {far['hit_signed'].mean():.0%}, "
              f"random planes {scored['hit_random'].mean():.0%} / {far['hit_random'].mean():.0%}; "
              f"active planes (|InP|) high/medium/low {t['active_high'].mean():.1f}/{t['active_medium'].mean():.1f}/{t['active_low'].mean():.1f}")
    table = pd.concat(tables, ignore_index=True)
    table.to_csv(args.out / "pulse_check.csv", index=False)
    boot = pd.concat(a41, ignore_index=True)
    boot.to_csv(args.out / "pulse_a41.csv", index=False)
    print(boot.round(3).to_string(index=False))
    out = {"table": table, "a41": boot}
    save_figure(fig7(panels), args.out, "inp_fig7")
    save_figure(fig23(curves), args.out, "pulse_fig23")
    return out


if __name__ == "__main__":
    main()
