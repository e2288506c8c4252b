"""Induction heads forming in a small byte-level language model, watched with the trajectory callback (issue 35 part 3;
Olsson et al. 2022, "In-context Learning and Induction Heads").

Model and data (``interp.lab``): a ``--layers``-layer decoder (default 3; ``--heads`` 4 heads of width ``d_model / heads``
= 16, ``--d-model`` 64, SwiGLU d_mlp ``4 d_model``, ``--pe`` RoPE with base 1e4) trained on windows of ``--length``
(256) tokens, ``<bos>`` and 255 bytes of the first 90% of ``--corpus`` (``stdlib``, the default: the standard library's
source; ``pydoc``: the Python language reference, 24 times fewer bytes; ``interp.lab.text_lm.split_text``; next-token
loss on every position, no passkey rows), ``--steps`` (10000) AdamW steps of ``--batch`` (64) windows (``--lr`` 3e-3,
``--warmup`` 50 steps, cosine to a tenth, weight decay 0.1), ``--seeds`` (3) seeds, on ``--device`` (``auto``: the GPU
where there is one; there ``--jobs`` defaults to one process per seed). The defaults are the committed run's: about
5 minutes on an H100, about 100 minutes per seed on one CPU core.

At the steps of ``log_schedule(steps, --points 30)`` and every ``--every`` (500) steps
(``interp.experiments.trajectory``) the callback (``ScanCallback``) scans 8 probe prompts of repeated random tokens
with the token-matched scores and the entropy switched on (``ScanConfig(token_match=True, shape=True)``): per head
the previous-token and induction scores (TransformerLens ``detect_head``; on ``<bos>, r, r`` a perfect induction head
scores about 0.5, since only the second copy has an earlier copy to look at), slash scores per lag, sink weight, r1
and the rest of the default measures. ``--probes seen`` (default): ``<bos>``, then r, r with r drawn from the byte ids
that occur in the training text, so the probes start as the training windows do and every embedding was trained;
``--probes all``: r from the whole vocabulary, no ``<bos>`` (``interp.corpus.prompts(..., "repeated-random")``, the
first committed run). Each scan also records the in-context-learning score (``icl_score``: mean loss over the
``--icl-band`` (16) tokens ending at token ``late = length - 1`` minus over the 16 tokens from ``early = 8``, mean
over ``--icl-windows`` (128) disjoint held-out windows; Olsson et al. use single tokens, the 500th and the 50th, of
longer contexts over a large dataset) and the held-out loss.

Per seed (``curves``): the induction score of the best head in layers ``1 .. L-1`` (it can read an earlier layer's
previous-token head) and the previous-token score of the best head in layers ``0 .. L-2``; the formation step of the
first induction head (``t_induction``: the first scanned step at which that induction score >= 0.3) and of the first
previous-token head (``t_prev``), the ICL score's largest drop between two scans (the phase change) and its step.
The 0.3 level is the atlas's role threshold (``interp.experiments.trajectory.final_roles``), fixed before the runs.
Causal check at the end of training: ``interp.experiments.effects.head_effects`` (mean ablation, every head, on 16
probes of the same kind, 1000 bootstrap resamples): the top induction head's ``dnll`` against the other heads'; and
``set_effects``: every head of the layers before the top induction head's, mean-ablated together
(``earlier_joint_dnll``: where the copying reads the previous token when no single head does).

The committed run: the defaults, through ``bash analyses/benchmarks/device_check.sh induction`` on a lent H100 (3 seeds
in 3 processes, 296 s in all). A second committed run, ``--probes text --name emergence_textprobe --steps 3000 --every
100 --seeds 1 --device cpu`` (``make_all``'s ``induction_textprobe``; 28 minutes on one core here), scans probes of
repeated held-out text instead; a third, ``--repeat-frac 0.25 --batch 16 --steps 3000 --every 100 --device cpu --name
emergence_textrepeat`` (``induction_textrepeat``; 3 seeds in 3 processes on this machine's 2 cores, about 25 minutes),
is the positive control: a quarter of each batch's windows are repeated random sequences of the probes' kind
(``interp.lab.text_lm.repeat_rows``), which an induction head predicts. Configurations tried before them (one seed each unless said, ``--probes seen``, the
language reference (``--corpus pydoc``) unless said, windows of 256, batch 16 unless said, d_model 64 (4 heads of 16)
unless said, a scan every 100 steps; scores at the last step, induction over layers ``1 .. L-1``, previous-token over
``0 .. L-2``; this shared 2-core machine, one thread):

====================================================  =====  ===========  ===========  =========  =======
configuration                                         steps  induction    prev-token   test loss  seconds
====================================================  =====  ===========  ===========  =========  =======
2 layers, RoPE, windows 96, probes all (3 seeds)      4000   0.002-0.005  0.055-0.069  1.41-1.46  379-493
2 layers, RoPE                                        2000   0.014        0.079        1.34       385
3 layers, RoPE                                        2000   0.011        0.460        1.30       414
2 layers, RoPE, d_model 128 (4 heads of 32), batch 8  1600   0.014        0.044        1.34       stopped
2 layers, learned positions                           2000   0.010        0.195        1.37       279
3 layers, partial RoPE (2 of 8 planes rotate)         1400   0.012        0.121        1.37       stopped
3 layers, RoPE (3 seeds, the earlier committed run)   3000   0.011-0.012  0.341-0.441  1.35       474-479
3 layers, RoPE, batch 64 (44M tokens by step 2700)    2700   0.012        0.515        1.85       stopped
3 layers, RoPE, batch 64, ``--corpus stdlib``          3000   0.007        0.466        1.07       stopped
====================================================  =====  ===========  ===========  =========  =======

The batch-64 pilot (after the 3-seed CPU run) overfits the 419k training bytes: its held-out loss bottoms at 1.34
near step 700 (11M tokens, 27 passes over the text) and climbs to 1.85 by step 2700, while the ICL score turns
positive (+0.17: later tokens predicted worse, memorised text rather than copying). Longer training on pydoc alone
only memorises more; ``--corpus stdlib`` (the standard library's source, 24 times the bytes) is the text for the
long GPU runs. On it the same pilot (49M tokens by step 3000, five passes) kept improving on held-out text and its
ICL score stayed near -0.18 from about step 700 on (later tokens predicted better), yet no head scored as an induction
head on the repeated random probes (0.007): the context it uses at this size is not copying of random sequences.

In the RoPE runs layer 0's heads spread their attention over dozens of keys (entropy 3.4 to 4.3 nats on the probes)
and the previous-token heads form in layer 1 (previous-token score 0.52 there at the end of the 2-layer d_model-64
run), which in a 2-layer model leaves no later layer to read them; with 3 layers they form in layer 1 within a few
hundred steps, hence the default. No run formed an induction head. The gain an induction head could
bring is there: in the second half of the held-out 255-byte windows the byte after the last earlier copy of the
current 3-byte context is the next byte 75% of the time, for 51% of the bytes.

Writes ``emergence_text_trajectory.csv`` (the callback's table: one row per seed, step, layer, head),
``emergence_text_loss.csv`` (every step's training loss), ``emergence_text_runs.csv`` (per seed: settings, formation
steps, phase change, final scores, effect of the top induction head, training and scan seconds),
``emergence_text_effects.csv`` (the effects table per seed; while the run goes on ``emergence_text_runs.partial.csv``
holds the finished seeds' rows and ``emergence_text_trajectory.seed<k>.partial.csv`` each unfinished seed's scans so
far), ``emergence_text_summary.csv`` (mean, min / max and 95%
t-interval over seeds) and ``emergence_text.{html,png}``; the trajectory pages ``emergence_text_seed<k>.html``
(``interp.report.trajectory_page``); ``--name`` replaces the stem ``emergence_text``.

    python -m analyses.emergence.induction_text [--steps 10000] [--layers 3] [--length 256] [--probes seen|text|all]
        [--corpus stdlib|pydoc] [--device auto|cpu|cuda] [--jobs 0] [--quick] [--out DIR]
    python -m analyses.emergence.induction_text --replot [--out DIR]      (the figure and pages from the tables)
"""

from __future__ import annotations

import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.colors
import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots

from interp import corpus
from interp.engine import ScanConfig
from interp.experiments.effects import EffectsConfig, head_effects, set_effects
from interp.experiments.stats import bootstrap_interval
from interp.experiments.trajectory import (
    ScanCallback, every_schedule, first_crossing, icl_score, log_schedule, seed_summary)
from interp.lab import LabConfig, LabForCausalLM, TrainConfig, lab_loaded, lm_loss, train_model
from interp.lab import text_lm
from interp.lab.vocab import BOS
from interp.report.trajectory_page import write_trajectory_page

from analyses._common import one_thread, parser, save_figure

ROLE = 0.3  # the atlas's role threshold (final_roles), fixed before the runs
SETTINGS = ("seed", "top_layer", "top_head", "steps", "length", "batch", "d_model", "layers", "heads", "pe", "lr", "probes", "repeat_frac", "corpus", "device", "role_level",
            "early", "late", "icl_band", "icl_windows")
EARLY = 8
OPTIONS = (("--steps", int, 10000, "AdamW steps"), ("--seeds", int, 3, "seeds"),
           ("--length", int, 256, "training window (tokens, <bos> included)"), ("--batch", int, 64, "windows per step"),
           ("--layers", int, 3, "decoder layers"), ("--heads", int, 4, "heads per layer"), ("--d-model", int, 64, "residual width"),
           ("--points", int, 30, "scheduled scans (log schedule)"),
           ("--every", int, 500, "also scan every so many steps (0: the log schedule only)"),
           ("--pe", str, "rope", "position encoding (interp.lab.model.PES: rope, learned, ...)"),
           ("--lr", float, 3e-3, "peak learning rate"), ("--warmup", int, 50, "warmup steps (at most a quarter of --steps)"),
           ("--icl-windows", int, 128, "held-out windows of the ICL score"),
           ("--icl-band", int, 16, "tokens averaged at each end of the ICL score (1: Olsson et al.'s single tokens)"),
           ("--corpus", str, "stdlib", "training text: pydoc (the language reference, 419k training bytes) or stdlib (the "
                                     "standard library's source, about 10 MB: for runs long enough to overfit pydoc)"),
           ("--device", str, "auto", "where to train and scan: auto (a GPU where there is one), cpu or cuda (the scans then "
                                    "run on the Triton engine)"),
           ("--jobs", int, 0, "seeds trained at once, one process each (0: every seed at once on a GPU, which a small model "
                              "leaves mostly idle, one at a time on a CPU; on a CPU "
                              "each process takes one core)"),
           ("--repeat-frac", float, 0.0, "share of each batch's windows that are repeated random sequences (<bos>, r, r "
                                          "over the training text's byte ids: a positive control that trains copying)"),
           ("--probes", str, "seen", "repeated probe sequences: all (random ids from the whole vocabulary, no <bos>) | seen "
                                    "(<bos>, then random ids that occur in the training text) | text (<bos>, then a held-out "
                                    "stretch of text, repeated)"))
PROBES = ("all", "seen", "text")


def repeated_probes(loaded, train: np.ndarray, kind: str, m: int, n: int, seed: int, test: np.ndarray | None = None) -> torch.Tensor:
    """``[m, n]`` probes of a sequence and its repeat. ``kind="all"``: r, r with r drawn from the whole vocabulary and
    no ``<bos>`` (``interp.corpus.prompts(..., "repeated-random")``; the lab's tokenizer adds none). ``"seen"``:
    ``<bos>``, r, r (the second copy cut to fit) with r drawn only from the byte ids that occur in the training text,
    so the probes look like the training windows at position 0 and every token's embedding was trained. ``"text"``:
    ``<bos>``, s, s with s a stretch of ``n // 2`` bytes of the held-out text ``test`` at a random start (copying as
    the model would meet it in the text; s can hold repeats of its own, which the induction score's lag ignores).

    Raises:
        ValueError: an unknown ``kind``, or ``"text"`` without ``test``.
    """
    rng = np.random.default_rng(seed)
    if kind == "all":
        return corpus.prompts(loaded, "repeated-random", m, n, seed=seed)
    if kind == "seen":  # the positive control's training rows (--repeat-frac) are drawn the same way
        return text_lm.repeat_rows(np.unique(train), n, m, rng)
    if kind == "text" and test is not None:
        r = torch.as_tensor(np.stack([test[s: s + n // 2] for s in rng.integers(0, len(test) - n // 2, m)]), dtype=torch.long)
        return torch.cat([torch.full((m, 1), BOS), r, r], 1)[:, :n]
    raise ValueError(f"--probes {kind}: use {' or '.join(PROBES)} (text needs the held-out text)")


def curves(traj: pd.DataFrame) -> pd.DataFrame:
    """Per scanned step: ``induction`` (the largest induction score of a head in layers ``1 .. L-1``, which can read
    an earlier layer's previous-token head), ``prev`` (the largest previous-token score in layers ``0 .. L-2``, which
    a later layer can read), ``icl`` and ``test_loss``; with 2 layers, layer 1's induction and layer 0's
    previous-token score."""
    L = int(traj["layer"].max()) + 1
    ind = traj[traj["layer"] >= 1].groupby("step")["induction_score"].max()
    prev = traj[traj["layer"] <= L - 2].groupby("step")["prev_token_score"].max()
    rest = traj.groupby("step")[["icl_score", "test_loss"]].first()
    return pd.DataFrame({"induction": ind, "prev": prev, "icl": rest["icl_score"], "test_loss": rest["test_loss"]}).reset_index()


def run_seed(seed: int, args, train: np.ndarray, test: np.ndarray) -> tuple[pd.DataFrame, pd.DataFrame, dict, pd.DataFrame]:
    """Train one model with the callback; returns ``(trajectory, losses, run row, effects table)``."""
    n = args.length
    torch.manual_seed(seed)
    cfg = LabConfig(vocab_size=len(text_lm.BYTE_VOCAB), n_layers=args.layers, n_heads=args.heads, d_model=args.d_model,
                    d_mlp=4 * args.d_model, max_positions=n, pe=args.pe)
    model = LabForCausalLM(cfg).to(args.device)
    loaded = lab_loaded(model, text_lm.BYTE_VOCAB)
    probes = repeated_probes(loaded, train, args.probes, 8, n, 1000 + seed, test)
    windows = text_lm.disjoint_windows(test, n, args.icl_windows)

    def extras(m):
        return {"icl_score": icl_score(m, windows, EARLY, n - 1, width=args.icl_band),
                "test_loss": float(text_lm.token_nll(m, windows).mean())}

    cb = ScanCallback(lambda m: lab_loaded(m, text_lm.BYTE_VOCAB), probes, ScanConfig(token_match=True, shape=True),
                      steps=sorted(set(log_schedule(args.steps, args.points))
                                   | set(every_schedule(args.steps, args.every) if args.every else ())), extras=extras)
    def progress(step, m, loss):  # one line per scan: the study's three curves as they move
        if cb.frame.shape[0] and cb.frame["step"].iloc[-1] == step:
            c = curves(cb.frame[cb.frame["step"] == step]).iloc[0]
            print(f"  seed {seed} step {step}: induction {c['induction']:.3f}  prev {c['prev']:.3f}  icl {c['icl']:+.3f}  "
                  f"test loss {c['test_loss']:.3f}", flush=True)
            cb.frame.assign(seed=seed).to_csv(args.out / f"{args.name}_trajectory.seed{seed}.partial.csv", index=False)

    t0 = time.perf_counter()
    train_model(model, text_lm.lm_batch_fn(train, n, args.batch, passkey_frac=0.0, repeat_frac=args.repeat_frac),
                TrainConfig(steps=args.steps, lr=args.lr, warmup=min(args.warmup, args.steps // 4), weight_decay=0.1, betas=(0.9, 0.95),
                            seed=seed), loss_fn=lm_loss, callbacks=[cb, progress])
    total = time.perf_counter() - t0
    traj = cb.frame.assign(seed=seed)
    per_step = curves(traj)
    d_icl = per_step["icl"].diff()
    k = int(d_icl.idxmin()) if d_icl.notna().any() else 0
    last = traj[traj["step"] == traj["step"].max()]
    top = last[last["layer"] >= 1].sort_values("induction_score").iloc[-1]
    trained = lab_loaded(model, text_lm.BYTE_VOCAB)  # eval mode again after training
    eff_probes = repeated_probes(trained, train, args.probes, 16, n, 2000 + seed, test)
    eff = head_effects(trained, eff_probes, EffectsConfig(interventions=("mean",), bootstrap=1000, seed=seed)).table.assign(seed=seed)
    # every head of the layers before the top induction head's, mean-ablated together: where it reads the previous token
    earlier = [(layer, h) for layer in range(int(top["layer"])) for h in range(args.heads)]
    joint = set_effects(trained, eff_probes, [earlier], "mean")[0]
    joint_lo, joint_hi = bootstrap_interval(joint, 1000, seed)
    top_eff = eff[(eff["layer"] == top["layer"]) & (eff["head"] == top["head"])].iloc[0]
    others = eff[~((eff["layer"] == top["layer"]) & (eff["head"] == top["head"]))]
    row = {"seed": seed, "steps": args.steps, "length": n, "batch": args.batch, "d_model": args.d_model, "layers": args.layers,
           "heads": args.heads, "pe": args.pe, "lr": args.lr, "probes": args.probes, "repeat_frac": args.repeat_frac, "corpus": args.corpus, "device": args.device, "role_level": ROLE, "early": EARLY, "late": n - 1,
           "icl_band": args.icl_band, "icl_windows": args.icl_windows, "t_induction": first_crossing(per_step, "induction", ROLE),
           "t_prev": first_crossing(per_step, "prev", ROLE),
           "phase_change_step": float(per_step["step"].iloc[k]), "phase_change_icl_drop": float(d_icl.iloc[k]) if k else np.nan,
           "icl_start": float(per_step["icl"].iloc[0]), "icl_end": float(per_step["icl"].iloc[-1]),
           "induction_end": float(per_step["induction"].iloc[-1]), "prev_end": float(per_step["prev"].iloc[-1]),
           "top_layer": int(top["layer"]), "top_head": int(top["head"]),
           "top_dnll": float(top_eff["dnll"]), "top_dnll_lo": float(top_eff["dnll_lo"]), "top_dnll_hi": float(top_eff["dnll_hi"]),
           "other_dnll_max": float(others["dnll"].max()), "other_dnll_median": float(others["dnll"].median()),
           "earlier_joint_dnll": float(joint.mean()), "earlier_joint_dnll_lo": float(joint_lo[0]),
           "earlier_joint_dnll_hi": float(joint_hi[0]),
           "test_loss_end": float(last["test_loss"].iloc[0]), "train_seconds": total - cb.seconds,
           "scan_seconds_per_checkpoint": float(traj.groupby("step")["scan_seconds"].first().mean()),
           "callback_seconds": cb.seconds, "checkpoints": int(traj["step"].nunique())}
    row["prev_before_induction"] = (float(row["t_prev"] < row["t_induction"])
                                    if np.isfinite(row["t_prev"]) and np.isfinite(row["t_induction"]) else np.nan)
    (args.out / f"{args.name}_trajectory.seed{seed}.partial.csv").unlink(missing_ok=True)
    return traj, cb.losses.assign(seed=seed), row, eff


def _run_seed_alone(seed: int, args, train: np.ndarray, test: np.ndarray):
    """``run_seed`` in a worker process of ``--jobs``: one thread, like the sequential loop."""
    with one_thread():
        return run_seed(seed, args, train, test)


def figure(traj: pd.DataFrame, corpus_name: str) -> go.Figure:
    """Per seed: the best induction and previous-token scores (``curves``) and the ICL score against step."""
    fig = make_subplots(rows=1, cols=3, subplot_titles=("max induction score, layers 1..L-1", "max previous-token score, layers 0..L-2",
                                                        "ICL score (loss late - early, nats)"))
    palette = plotly.colors.qualitative.Plotly
    for k, (seed, g) in enumerate(traj.groupby("seed")):
        c = curves(g).set_index("step")
        for col, s in enumerate((c["induction"], c["prev"], c["icl"]), start=1):  # one colour per seed in every panel
            fig.add_trace(go.Scatter(x=s.index, y=s.values, mode="lines+markers", name=f"seed {seed}", legendgroup=str(seed),
                                     line_color=palette[k % len(palette)], showlegend=col == 1,
                                     hovertemplate=f"seed {seed}<br>step %{{x}}<br>%{{y:.4f}}<extra></extra>"),
                          row=1, col=col)
    fig.update_xaxes(title_text="training step", type="log")
    L = int(traj["layer"].max()) + 1
    fig.update_layout(title=f"Induction heads forming in a {L}-layer byte-level model ({corpus_name})", height=440, width=1300)
    return fig


def write_figures(out: Path, traj: pd.DataFrame, losses: pd.DataFrame, runs: pd.DataFrame, name: str = "emergence_text") -> None:
    """``<name>.{html,png}`` and one trajectory page per seed from the study's tables (``--replot`` redraws
    them from the committed CSVs, e.g. after a GPU run on a machine without kaleido)."""
    corpus_name, layers = str(runs["corpus"].iloc[0]), int(runs["layers"].iloc[0])
    save_figure(figure(traj, corpus_name), out, name)
    for seed, g in traj.groupby("seed"):
        write_trajectory_page(g, out / f"{name}_seed{seed}.html", losses=losses[losses["seed"] == seed],
                              title=f"{layers}-layer byte model on {corpus_name}, seed {seed}", inline_js=False)


def main(argv: list[str] | None = None) -> pd.DataFrame:
    ap = parser(__doc__, "2 layers of width 32, length 32, 30 steps, one seed (seconds)")
    for flag, kind, default, text in OPTIONS:
        ap.add_argument(flag, type=kind, default=default, help=text)
    ap.add_argument("--name", default="emergence_text", help="stem of every file written (a second study beside the first)")
    ap.add_argument("--replot", action="store_true", help="only redraw the figure and pages from the tables in --out")
    args = ap.parse_args(argv)
    if args.replot:
        tables = {k: args.out / f"{args.name}_{k}.csv" for k in ("trajectory", "loss", "runs")}
        missing = [str(t) for t in tables.values() if not t.exists()]
        if missing:
            ap.error(f"--replot: no {', '.join(missing)}; run the study first (or pass its --out)")
        runs = pd.read_csv(tables["runs"])
        write_figures(args.out, pd.read_csv(tables["trajectory"]), pd.read_csv(tables["loss"]), runs, args.name)
        return runs
    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        ap.error(f"--device {args.device}: this machine has no CUDA GPU; use --device cpu")
    if args.quick:
        args.steps, args.seeds, args.length, args.batch, args.points, args.d_model = 30, 1, 32, 4, 6, 32
        args.layers, args.every, args.icl_windows, args.icl_band = 2, 0, 16, 4
    if args.jobs < 1:
        args.jobs = args.seeds if args.device.startswith("cuda") else 1
    args.out.mkdir(parents=True, exist_ok=True)
    if not 0 <= args.repeat_frac <= 1:
        ap.error(f"--repeat-frac {args.repeat_frac}: a share of each batch, between 0 and 1")
    if args.probes not in PROBES:
        ap.error(f"--probes {args.probes}: use {' or '.join(PROBES)}")
    if args.corpus not in text_lm.TEXT_CORPORA:
        ap.error(f"--corpus {args.corpus}: use {' or '.join(text_lm.TEXT_CORPORA)}")
    train, test = text_lm.split_text(args.corpus)
    t0 = time.perf_counter()
    parts = []

    def keep(part):  # each seed's run row kept as it ends: a time limit leaves the finished seeds (and the others' scans)
        parts.append(part)
        pd.DataFrame([p[2] for p in parts]).to_csv(args.out / f"{args.name}_runs.partial.csv", index=False)

    if args.jobs > 1:  # spawned processes: CUDA cannot be forked
        ctx = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(min(args.jobs, args.seeds), mp_context=ctx) as pool:
            for done in as_completed([pool.submit(_run_seed_alone, seed, args, train, test) for seed in range(args.seeds)]):
                keep(done.result())
        parts.sort(key=lambda p: p[2]["seed"])
    else:
        with one_thread():
            for seed in range(args.seeds):
                keep(run_seed(seed, args, train, test))
    traj = pd.concat([p[0] for p in parts], ignore_index=True)
    losses = pd.concat([p[1] for p in parts], ignore_index=True)
    runs = pd.DataFrame([p[2] for p in parts])
    effects = pd.concat([p[3] for p in parts], ignore_index=True)
    summary = seed_summary(runs.assign(model=f"text-{args.layers}l"), ["model"], [c for c in runs.columns if c not in SETTINGS])
    traj.to_csv(args.out / f"{args.name}_trajectory.csv", index=False)
    losses.to_csv(args.out / f"{args.name}_loss.csv", index=False)
    runs.to_csv(args.out / f"{args.name}_runs.csv", index=False)
    effects.to_csv(args.out / f"{args.name}_effects.csv", index=False)
    summary.to_csv(args.out / f"{args.name}_summary.csv", index=False)
    write_figures(args.out, traj, losses, runs, args.name)
    (args.out / f"{args.name}_runs.partial.csv").unlink()
    print(f"{args.seeds} seeds in {time.perf_counter() - t0:.0f} s", flush=True)
    return runs


if __name__ == "__main__":
    main()
