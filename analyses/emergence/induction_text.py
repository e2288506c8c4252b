"""Induction heads forming in a small byte-level language model, watched with the trajectory callback (issue 35 part 3;
Olsson et al. 2022, "In-context Learning and Induction Heads").

Model and data (``interp.lab``): a 2-layer RoPE decoder (4 heads of width 16, d_model 64, SwiGLU d_mlp 256, RoPE base
1e4) trained on windows of ``--length`` bytes of the first 90% of the Python language reference
(``interp.lab.text_lm``; next-token loss on every position, no passkey rows), ``--steps`` AdamW steps of ``--batch``
windows (lr 3e-3, 50 warmup steps, cosine), ``--seeds`` seeds.

At the steps of ``interp.experiments.trajectory.log_schedule(steps, 30)`` the callback
(``interp.experiments.trajectory.ScanCallback``) scans 8 probe prompts of repeated random tokens (r, r with ``|r| = length / 2``: the lab's
tokenizer adds no BOS, so none is prepended; ``interp.corpus.prompts(..., "repeated-random")``; ``--probes seen`` draws r only from the
byte ids that occur in the training text) with the token-matched scores and the
entropy switched on (``ScanConfig(token_match=True, shape=True)``): per head the previous-token and induction scores
(TransformerLens ``detect_head``), slash scores per lag, sink weight, r1 and the rest of the default measures. Each
scheduled step also records the in-context-learning score (``icl_score``: loss at token ``late = length - 1`` minus
loss at token ``early = 8``, mean over 16 held-out windows; Olsson et al. use the 500th and 50th token of longer
contexts) and the held-out loss.

Per seed: the formation step of the first induction head (``t_induction``: the first scanned step at which some
layer-1 head's induction score >= 0.3), of the first previous-token head (``t_prev``: some layer-0 head's
previous-token score >= 0.3), the ICL score's largest drop between two scans (the phase change) and its step. The
0.3 level is the atlas's role threshold (``interp.experiments.trajectory.final_roles``), fixed before the runs.
Causal check at the end of training: ``interp.experiments.effects.head_effects`` (mean ablation, every head, on 16
repeated-random prompts, 1000 bootstrap resamples): the top induction head's ``dnll`` against the other heads'.

Writes ``emergence_text_trajectory.csv`` (the callback's table: one row per seed, step, layer, head),
``emergence_text_loss.csv`` (every step's training loss), ``emergence_text_runs.csv`` (per seed: formation steps,
phase change, final scores, effect of the top induction head, training and scan seconds),
``emergence_text_effects.csv`` (the effects table per seed), ``emergence_text_summary.csv`` (mean, min / max and 95%
t-interval over seeds) and ``emergence_text.{html,png}``; the trajectory pages ``emergence_text_seed<k>.html``
(``interp.report.trajectory_page``).

    python analyses/emergence/induction_text.py [--steps 4000] [--seeds 3] [--length 96] [--quick] [--out DIR]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # analyses/_common.py
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # this checkout's interp
from _common import one_thread, parser, save_figure  # noqa: E402

from interp import corpus  # noqa: E402
from interp.engine import ScanConfig  # noqa: E402
from interp.experiments.effects import EffectsConfig, head_effects  # noqa: E402
from interp.experiments.trajectory import ScanCallback, first_crossing, icl_score, log_schedule, seed_summary  # noqa: E402
from interp.lab import LabConfig, LabForCausalLM, TrainConfig, lab_loaded, lm_loss, train_model  # noqa: E402
from interp.lab import text_lm  # noqa: E402
from interp.report.trajectory_page import write_trajectory_page  # noqa: E402

ROLE = 0.3  # the atlas's role threshold (final_roles), fixed before the runs
SETTINGS = ("seed", "top_layer", "top_head", "steps", "length", "batch", "d_model", "layers", "heads", "role_level", "early", "late")
EARLY = 8
OPTIONS = (("--steps", int, 4000, "AdamW steps"), ("--seeds", int, 3, "seeds"),
           ("--length", int, 96, "training window (tokens, <bos> included)"), ("--batch", int, 16, "windows per step"),
           ("--layers", int, 2, "decoder layers"), ("--heads", int, 4, "heads per layer"), ("--d-model", int, 64, "residual width"),
           ("--points", int, 30, "scheduled scans (log schedule)"),
           ("--probes", str, "all", "repeated-random probe tokens: all (the whole vocabulary) | seen (ids in the training text)"))


def repeated_probes(loaded, train: np.ndarray, kind: str, m: int, n: int, seed: int) -> torch.Tensor:
    """``[m, n]`` repeated-random probes (r, r; ``<bos>`` first only where the tokenizer adds one): ``kind="all"`` draws r from the whole vocabulary
    (``interp.corpus.prompts(..., "repeated-random")``, the committed runs), ``"seen"`` only from the byte ids that occur
    in the training text (whose embeddings were trained)."""
    if kind == "all":
        return corpus.prompts(loaded, "repeated-random", m, n, seed=seed)
    ids, bos = np.unique(train), loaded.bos_token_id
    body = n - (bos is not None)  # as interp.corpus.prompts: BOS only where the tokenizer adds one
    r = torch.as_tensor(ids[np.random.default_rng(seed).integers(0, len(ids), (m, -(-body // 2)))])
    out = torch.cat([r, r], 1)[:, :body]
    return out if bos is None else torch.cat([torch.full((m, 1), bos), out], 1)


def run_seed(seed: int, args, train: np.ndarray, test: np.ndarray) -> tuple[pd.DataFrame, pd.DataFrame, dict, pd.DataFrame]:
    """Train one model with the callback; returns ``(trajectory, losses, run row, effects table)``."""
    n = args.length
    torch.manual_seed(seed)
    cfg = LabConfig(vocab_size=len(text_lm.BYTE_VOCAB), n_layers=args.layers, n_heads=args.heads, d_model=args.d_model,
                    d_mlp=4 * args.d_model, max_positions=n)
    model = LabForCausalLM(cfg)
    loaded = lab_loaded(model, text_lm.BYTE_VOCAB)
    probes = repeated_probes(loaded, train, args.probes, 8, n, 1000 + seed)
    windows = text_lm.disjoint_windows(test, n, 16)

    def extras(m):
        return {"icl_score": icl_score(m, windows, EARLY, n - 1),
                "test_loss": float(text_lm.token_nll(m, windows).mean())}

    cb = ScanCallback(lambda m: lab_loaded(m, text_lm.BYTE_VOCAB), probes, ScanConfig(token_match=True, shape=True),
                      steps=log_schedule(args.steps, args.points), extras=extras)
    t0 = time.perf_counter()
    train_model(model, text_lm.lm_batch_fn(train, n, args.batch, passkey_frac=0.0),
                TrainConfig(steps=args.steps, lr=3e-3, warmup=min(50, args.steps // 4), weight_decay=0.1, betas=(0.9, 0.95),
                            seed=seed), loss_fn=lm_loss, callbacks=[cb])
    total = time.perf_counter() - t0
    traj = cb.frame.assign(seed=seed)
    per_step = traj.groupby("step").agg(
        induction=("induction_score", lambda s: s[traj.loc[s.index, "layer"] == args.layers - 1].max()),
        prev=("prev_token_score", lambda s: s[traj.loc[s.index, "layer"] == 0].max()),
        icl=("icl_score", "first")).reset_index()
    d_icl = per_step["icl"].diff()
    k = int(d_icl.idxmin()) if d_icl.notna().any() else 0
    last = traj[traj["step"] == traj["step"].max()]
    top = last[last["layer"] == args.layers - 1].sort_values("induction_score").iloc[-1]
    eff = head_effects(lab_loaded(model, text_lm.BYTE_VOCAB), repeated_probes(loaded, train, args.probes, 16, n, 2000 + seed),
                       EffectsConfig(interventions=("mean",), bootstrap=1000, seed=seed)).table.assign(seed=seed)
    top_eff = eff[(eff["layer"] == top["layer"]) & (eff["head"] == top["head"])].iloc[0]
    others = eff[~((eff["layer"] == top["layer"]) & (eff["head"] == top["head"]))]
    row = {"seed": seed, "steps": args.steps, "length": n, "batch": args.batch, "d_model": args.d_model, "layers": args.layers,
           "heads": args.heads, "role_level": ROLE, "early": EARLY, "late": n - 1, "t_induction": first_crossing(per_step, "induction", ROLE),
           "t_prev": first_crossing(per_step, "prev", ROLE),
           "phase_change_step": float(per_step["step"].iloc[k]), "phase_change_icl_drop": float(d_icl.iloc[k]) if k else np.nan,
           "icl_start": float(per_step["icl"].iloc[0]), "icl_end": float(per_step["icl"].iloc[-1]),
           "induction_end": float(per_step["induction"].iloc[-1]), "prev_end": float(per_step["prev"].iloc[-1]),
           "top_layer": int(top["layer"]), "top_head": int(top["head"]),
           "top_dnll": float(top_eff["dnll"]), "top_dnll_lo": float(top_eff["dnll_lo"]), "top_dnll_hi": float(top_eff["dnll_hi"]),
           "other_dnll_max": float(others["dnll"].max()), "other_dnll_median": float(others["dnll"].median()),
           "test_loss_end": float(last["test_loss"].iloc[0]), "train_seconds": total - cb.seconds,
           "scan_seconds_per_checkpoint": float(traj.groupby("step")["scan_seconds"].first().mean()),
           "callback_seconds": cb.seconds, "checkpoints": int(traj["step"].nunique())}
    row["prev_before_induction"] = (float(row["t_prev"] < row["t_induction"])
                                    if np.isfinite(row["t_prev"]) and np.isfinite(row["t_induction"]) else np.nan)
    return traj, cb.losses.assign(seed=seed), row, eff


def figure(traj: pd.DataFrame) -> go.Figure:
    """Per seed: best layer-1 induction score, best layer-0 previous-token score and the ICL score against step."""
    fig = make_subplots(rows=1, cols=3, subplot_titles=("max induction score, last layer", "max previous-token score, layer 0",
                                                        "ICL score (loss late - early, nats)"))
    L = int(traj["layer"].max())
    for seed, g in traj.groupby("seed"):
        ind = g[g["layer"] == L].groupby("step")["induction_score"].max()
        prev = g[g["layer"] == 0].groupby("step")["prev_token_score"].max()
        icl = g.groupby("step")["icl_score"].first()
        for col, s in enumerate((ind, prev, icl), start=1):
            fig.add_trace(go.Scatter(x=s.index, y=s.values, mode="lines+markers", name=f"seed {seed}", legendgroup=str(seed),
                                     showlegend=col == 1, hovertemplate=f"seed {seed}<br>step %{{x}}<br>%{{y:.4f}}<extra></extra>"),
                          row=1, col=col)
    fig.update_xaxes(title_text="training step", type="log")
    fig.update_layout(title="Induction heads forming in a 2-layer byte-level model (pydoc)", height=440, width=1300)
    return fig


def main(argv: list[str] | None = None) -> pd.DataFrame:
    ap = parser(__doc__, "length 32, 30 steps, one seed (seconds)")
    for flag, kind, default, text in OPTIONS:
        ap.add_argument(flag, type=kind, default=default, help=text)
    args = ap.parse_args(argv)
    if args.quick:
        args.steps, args.seeds, args.length, args.batch, args.points, args.d_model = 30, 1, 32, 4, 6, 32
    args.out.mkdir(parents=True, exist_ok=True)
    train, test = text_lm.split_pydoc()
    t0 = time.perf_counter()
    with one_thread():
        parts = [run_seed(s, args, train, test) for s in range(args.seeds)]
    traj = pd.concat([p[0] for p in parts], ignore_index=True)
    losses = pd.concat([p[1] for p in parts], ignore_index=True)
    runs = pd.DataFrame([p[2] for p in parts])
    effects = pd.concat([p[3] for p in parts], ignore_index=True)
    summary = seed_summary(runs.assign(model="text-2l"), ["model"], [c for c in runs.columns if c not in SETTINGS])
    traj.to_csv(args.out / "emergence_text_trajectory.csv", index=False)
    losses.to_csv(args.out / "emergence_text_loss.csv", index=False)
    runs.to_csv(args.out / "emergence_text_runs.csv", index=False)
    effects.to_csv(args.out / "emergence_text_effects.csv", index=False)
    summary.to_csv(args.out / "emergence_text_summary.csv", index=False)
    save_figure(figure(traj), args.out, "emergence_text")
    for seed, g in traj.groupby("seed"):
        write_trajectory_page(g, args.out / f"emergence_text_seed{seed}.html", losses=losses[losses["seed"] == seed],
                              title=f"2-layer byte model on pydoc, seed {seed}", inline_js=False)
    print(f"{args.seeds} seeds in {time.perf_counter() - t0:.0f} s", flush=True)
    return runs


if __name__ == "__main__":
    main()
