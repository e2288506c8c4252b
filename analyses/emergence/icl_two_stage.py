"""Paper 004 App. D (Theorem D.3) empirically: the two-stage emergence of a slash-dominant head in the reduced two-layer
RoPE transformer trained on in-context linear regression (``interp.lab.icl_regression``).

Setting (004 App. D.1, D.4, D.5, as close as stated in ``interp.lab.icl_regression``): ``K = 4`` orthonormal features,
Rademacher tasks ``w``, ``N_in = 16`` demonstrations (``N = 33`` at Delta = 1), embeddings on the cone ``c``, the
reduced model of eq. 22 (trainable ``W~Q1`` from 0, ``W~Q2`` from ``I``), the squared loss (eq. 16). Runs:

- ``schedule``: ``two-stage`` (Algorithm 1: ``tau1`` steps on ``W~Q1`` with ``W~Q2 = I``, then ``tau2`` steps on
  ``W~Q2``) and ``joint`` (both for ``tau1 + tau2`` steps); ``tau1 = tau2 = 300`` steps, learning rates
  ``eta1 = eta2 = 1`` (the first value tried; not tuned per condition), a fresh batch of 128 prompts per step
  (004: GD on the population loss);
- ``freq`` (Assumption D.1): ``pulse`` (exact pulse, D.1 holds with ``eps_FN = 0``), ``rope`` (standard geometric
  RoPE frequencies on the cone planes), ``low`` (every plane below ``N ** -2``: item 2 fails) and ``nope``;
- ``delta`` 1 (all four frequency sets), 2 and 3 (D.6's extension; ``pulse`` only, for the CPU budget);
- ``layer1 = full`` (ours; ``joint``, ``pulse`` and ``rope``): full trainable ``W_Q1, W_K1`` so the layer-1 queries
  can depend on the token; for the rank question (r1 of the layer-1 pre-RoPE queries is exactly 1 in the reduced model);
- ``--seeds`` seeds each (initialisation is fixed by Algorithm 1; the seed draws the training prompts and the
  evaluation batch of 256 prompts).

Measured on the evaluation batch (``interp.lab.icl_regression.measure``) at every step up to 40 and every 10th after:
the layer-1 mass at lag Delta (``lag_min``: min over query positions, as Theorem D.3 Stage I; ``lag_mean``), the
layer-2 feature mass ``S2_k`` (eq. 17), the loss and ``r1_q1``. Formation times (``first_crossing``), with two
concentration levels fixed before the runs:

- ``theory``: Theorem D.3's orders with constant 1: Stage I when ``lag_min >= 1 - N ** -1/2``; Stage II when
  ``(1 - S2_k) ** 2 <= N ** -1/4``, i.e. ``S2_k >= 1 - N ** -1/8``;
- ``fixed``: 0.9 for both (``eps = 0.1``).

Generalisation (D.6): ``rel_error_in`` / ``rel_error_ood``, the relative squared error of the trained model on fresh
prompts with Rademacher tasks and with Gaussian tasks ``w ~ N(0, 25 I)`` outside the training support.

Plateau: ``loss_share_at_t1`` = (loss(0) - loss(t1)) / (loss(0) - loss(end)), the share of the whole loss drop done
when layer 1 has become an SDH (small: the loss waits for Stage II).

Writes ``emergence_icl_trace.csv`` (every recorded step of every run), ``emergence_icl_runs.csv`` (one row per run:
formation times, losses, final masses, ``seconds``), ``emergence_icl_summary.csv`` (``seed_summary``: mean, every
seed's min / max and the 95% t-interval over seeds), ``emergence_icl_pulse.csv`` (``pulse_check`` of each frequency
set at each N) and ``emergence_icl.{html,png}``.

    python -m analyses.emergence.icl_two_stage [--seeds 3] [--tau 300] [--quick] [--out DIR]
"""

from __future__ import annotations

import time

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots

from interp.experiments.trajectory import first_crossing, seed_summary
from interp.lab.icl_regression import ICLData, frequencies, pulse_check, relative_error, train_icl

from analyses._common import one_thread, parser, save_figure

RUN_KEYS = ["delta", "freq", "schedule", "layer1"]
OPTIONS = (("--seeds", int, 3, "seeds per condition"), ("--tau", int, 300, "steps of each stage (tau1 = tau2)"),
           ("--lr", float, 1.0, "eta1 = eta2"), ("--K", int, 4, "orthonormal features (d_X = K)"),
           ("--n-in", int, 16, "demonstrations per prompt"), ("--batch", int, 128, "fresh prompts per gradient step"),
           ("--eval-batch", int, 256, "prompts of the fixed evaluation batch"))
QUICK = {"seeds": 1, "tau": 20, "K": 2, "n_in": 4, "batch": 32, "eval_batch": 32}
SETTINGS = ("seed", "N", "d_c", "K", "n_in", "tau", "lr", "batch", "eval_batch", "eps1_theory", "feature_level_theory")


def conditions(quick: bool) -> list[tuple[int, str, str, str]]:
    """``(delta, freq, schedule, layer1)`` of every run (module docstring)."""
    if quick:
        return [(1, f, s, "reduced") for f in ("pulse", "nope") for s in ("two-stage", "joint")] + [(2, "pulse", "joint", "reduced"),
                                                                                                 (1, "pulse", "joint", "full")]
    out = [(1, f, s, "reduced") for f in ("pulse", "rope", "low", "nope") for s in ("two-stage", "joint")]
    out += [(d, "pulse", s, "reduced") for d in (2, 3) for s in ("two-stage", "joint")]
    out += [(1, f, "joint", "full") for f in ("pulse", "rope")]
    return out


def levels(N: int) -> dict[str, tuple[float, float]]:
    """``{rule: (stage-I level on lag_min, stage-II level on feature_mass)}`` (module docstring)."""
    return {"theory": (1 - N ** -0.5, 1 - N ** -0.125), "fixed": (0.9, 0.9)}


def run_summary(trace: pd.DataFrame, N: int) -> dict:
    """One run's formation times, losses and final masses (module docstring)."""
    out = {}
    l0, lend = trace["loss"].iloc[0], trace["loss"].iloc[-1]
    for rule, (a, b) in levels(N).items():
        t1, t2 = first_crossing(trace, "lag_min", a), first_crossing(trace, "feature_mass", b)
        out[f"t1_{rule}"], out[f"t2_{rule}"] = t1, t2
        out[f"stage1_first_{rule}"] = float(t1 < t2) if np.isfinite(t1) and np.isfinite(t2) else np.nan
        if np.isfinite(t1):
            lt1 = float(trace.loc[trace["step"] == t1, "loss"].iloc[0])
            out[f"loss_share_at_t1_{rule}"] = (l0 - lt1) / (l0 - lend) if l0 > lend else np.nan
        else:
            out[f"loss_share_at_t1_{rule}"] = np.nan
    last = trace.iloc[-1]
    n_q = np.arange(1, N + 1)
    out.update({"loss_start": l0, "loss_end": lend, "lag_min_end": last["lag_min"], "lag_mean_end": last["lag_mean"],
                "lag1_mean_end": last["lag1_mean"], "feature_mass_end": last["feature_mass"],
                "feature_mass_start": trace["feature_mass"].iloc[0], "r1_q1_end": last["r1_q1"],
                "r1_q1_min": trace["r1_q1"].min(), "uniform_lag_mass": float(np.mean(1.0 / n_q[1:]))})
    return out


def generalisation(model, data: ICLData, seed: int, n: int) -> dict:
    """Relative error ``mean (y^ - y)^2 / mean y^2`` of the trained model on fresh prompts: Rademacher tasks (the
    training distribution) and Gaussian tasks ``w ~ N(0, 25 I)`` outside its support (D.6's OOD statement)."""
    g = torch.Generator().manual_seed(20_000 + seed)
    ind = relative_error(model, data.sample(n, g))
    ood = relative_error(model, data.sample(n, g, w=5 * torch.randn(n, data.K, generator=g, dtype=torch.float64)))
    return {"rel_error_in": ind, "rel_error_ood": ood}


def figure(trace: pd.DataFrame) -> go.Figure:
    """Lag-Delta mass (min over queries), feature mass and loss against step; one line per run, Delta = 1."""
    fig = make_subplots(rows=1, cols=3, subplot_titles=("layer 1: lag-Delta mass, min over queries",
                                                        "layer 2: feature mass (eq. 17)", "loss (eq. 16)"))
    colours = {"pulse": "#1f77b4", "rope": "#2ca02c", "low": "#ff7f0e", "nope": "#d62728"}
    t = trace[trace["layer1"] == "reduced"]
    shown = set()
    for (delta, freq, sched, seed), g in t.groupby(["delta", "freq", "schedule", "seed"]):
        name = f"{freq}, {sched}, Delta={delta}"
        dash = "solid" if sched == "joint" else "dot"
        for col, y in enumerate(("lag_min", "feature_mass", "loss"), start=1):
            fig.add_trace(go.Scatter(x=g["step"], y=g[y], mode="lines", name=name, legendgroup=name,
                                     showlegend=col == 1 and name not in shown, opacity=0.35 + 0.65 * (delta == 1),
                                     line=dict(color=colours[freq], dash=dash, width=1.5),
                                     hovertemplate=f"{name}, seed {seed}<br>step %{{x}}<br>{y} %{{y:.4f}}<extra></extra>"),
                          row=1, col=col)
        shown.add(name)
    return fig.update_xaxes(title_text="gradient step", type="log").update_layout(
        title="004 App. D: two-stage emergence (dotted: Algorithm 1's two stages; solid: joint)", height=480, width=1400)


def run(conds: list[tuple[int, str, str, str]], args) -> tuple[list[pd.DataFrame], list[dict]]:
    """Train every ``(delta, freq, schedule, layer1)`` of ``conds`` for ``args.seeds`` seeds with ``args``' settings
    (``OPTIONS``): the traces (one frame per run) and the runs' rows (``run_summary``, ``generalisation``, ``seconds``)."""
    traces, runs = [], []
    with one_thread():
        for delta, freq, sched, layer1 in conds:
            n_tok = (delta + 1) * args.n_in + 1
            data = ICLData(K=args.K, n_in=args.n_in, delta=delta, d_c=n_tok + 1)  # d_c = N + 1: the exact pulse covers |x| <= N
            theta = frequencies(freq, data)
            for seed in range(args.seeds):
                t0 = time.perf_counter()
                tr, model = train_icl(data, theta, schedule=sched, tau1=args.tau, tau2=args.tau, lr1=args.lr, lr2=args.lr,
                                  batch=args.batch, eval_batch=args.eval_batch, seed=seed, layer1=layer1)
                keys = {"delta": delta, "freq": freq, "schedule": sched, "layer1": layer1, "seed": seed, "N": data.N,
                        "d_c": data.d_c, "K": args.K, "n_in": args.n_in, "tau": args.tau, "lr": args.lr, "batch": args.batch,
                        "eval_batch": args.eval_batch, "eps1_theory": 1 - levels(data.N)["theory"][0],
                        "feature_level_theory": levels(data.N)["theory"][1]}
                traces.append(tr.assign(**keys))
                runs.append({**keys, **run_summary(tr, data.N), **generalisation(model, data, seed, args.eval_batch),
                             "seconds": time.perf_counter() - t0})
                print(f"delta {delta} {freq:5s} {sched:9s} {layer1:7s} seed {seed}: t1 {runs[-1]['t1_fixed']}, "
                      f"t2 {runs[-1]['t2_fixed']}, loss {runs[-1]['loss_end']:.4f} ({runs[-1]['seconds']:.1f} s)", flush=True)
    return traces, runs


def parse(doc: str, quick_help: str, argv: list[str] | None):
    """The arguments of an App. D script: ``OPTIONS`` (``QUICK`` applied under ``--quick``); ``--out`` created."""
    ap = parser(doc, quick_help)
    for flag, kind, default, text in OPTIONS:
        ap.add_argument(flag, type=kind, default=default, help=text)
    args = ap.parse_args(argv)
    if args.quick:
        vars(args).update(QUICK)
    args.out.mkdir(parents=True, exist_ok=True)
    return args


def main(argv: list[str] | None = None) -> pd.DataFrame:
    args = parse(__doc__, "K = 2, N_in = 4, 20 + 20 steps, one seed, six conditions (seconds)", argv)
    t_all = time.perf_counter()
    traces, runs = run(conditions(args.quick), args)
    pulses = []
    for delta in sorted({r["delta"] for r in runs}):
        data = ICLData(K=args.K, n_in=args.n_in, delta=delta, d_c=(delta + 1) * args.n_in + 2)
        for freq in ("pulse", "rope", "low", "nope"):
            pulses.append({"delta": delta, "N": data.N, "d_c": data.d_c, "freq": freq,
                           **pulse_check(frequencies(freq, data)[: data.d_c // 2], data.N)})
    trace = pd.concat(traces, ignore_index=True)
    run_df = pd.DataFrame(runs)
    values = [c for c in run_df.columns if c not in (*RUN_KEYS, *SETTINGS)]
    summary = seed_summary(run_df, RUN_KEYS, values)
    trace.to_csv(args.out / "emergence_icl_trace.csv", index=False)
    run_df.to_csv(args.out / "emergence_icl_runs.csv", index=False)
    summary.to_csv(args.out / "emergence_icl_summary.csv", index=False)
    pd.DataFrame(pulses).to_csv(args.out / "emergence_icl_pulse.csv", index=False)
    save_figure(figure(trace), args.out, "emergence_icl")
    print(f"{len(runs)} runs in {time.perf_counter() - t_all:.0f} s", flush=True)
    return run_df


if __name__ == "__main__":
    main()
