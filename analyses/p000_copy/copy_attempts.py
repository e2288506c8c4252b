"""What it takes for the 2-layer RoPE copier to copy lengths 1-64 (issue 22): named training recipes, their curves.

Paper 000 reports its standard-encoding copiers "almost perfect" in range after 30k (12 layers) or 60k (1 layer x 2
heads of width 512) AdamW steps of 256 Imbalanced strings of lengths 1-100 (App. D). On the shared 2-core CPU
this lab gets a few thousand steps of 32 strings, so each recipe below changes one thing against ``base`` (the
``copy_2d_rope.py`` baseline recipe: d_model 128, 4 heads of 32, SwiGLU MLP 128, RoPE base 1e4, peak lr 2e-3,
warmup 100, cosine to 0.1x, AdamW betas (0.9, 0.95), weight decay 0.01, batch 32, length curriculum 8 -> 64 raised
1.5x whenever the last 50 training batches reach 0.9 exact match) and is trained with ``copy_2d_rope.train_one``
(same model builder, curriculum and seeded training). Every ``eval_every`` steps the model is tested on
``copy_2d_rope.py``'s 200 Imbalanced test strings of lengths 1-64 (seed ``[seed, 1001, 0]``: the very strings of
``copy.csv``'s ``imbalanced, 1-64`` rows), teacher-forced whole-string exact match.

Recipes (``RECIPES``; ``--recipes`` picks some): ``base``; ``base500`` (RoPE base 500: more planes turn
appreciably over 130 positions); ``nocurr`` (no curriculum: lengths 1-64 from the start, as 000); ``thr08``
(curriculum threshold 0.8: moves on sooner); ``wide`` (d_model 256, 8 heads of 32, MLP 256, lr 1e-3); ``lr4e3``
(peak lr 4e-3); ``b64`` (batch 64); ``wide_long`` (``wide`` under its own name, so that a run with more ``--steps``
keeps its rows beside the 2,000-step ``wide`` ones; its cosine schedule spans its own steps).

Writes ``copy_attempts.csv`` (``recipe, seed, step, exact_match, seconds, final_hi, final_loss`` plus the recipe's
settings: the in-training test curve, one row per evaluation), ``copy_attempts_loss.csv`` (``recipe, seed, step,
loss, batch_exact_match, hi``: mean training loss, training-batch exact match and curriculum length per 10 steps)
and ``copy_attempts.{html,png}``. Rows of the recipes run replace that recipe's rows already in the CSVs, so
recipes can run as separate processes (``--recipes base --recipes thr08 ...``; the files are locked while updated).

    python -m analyses.p000_copy.copy_attempts [--recipes base thr08 ...] [--steps 1500] [--seed 0] [--jobs 2] [--quick]
"""

from __future__ import annotations

import fcntl
import multiprocessing as mp
import time
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from interp.lab.copy_task import sample_strings

from analyses._common import one_thread, parser, replace_rows, save_figure
from analyses.p000_copy import copy_2d_rope as c2d

BASE = dict(heads=4, lr=2e-3, curriculum=True)
RECIPES = {
    "base": {},
    "base500": dict(rope_base=500.0),
    "nocurr": dict(curriculum=False),
    "thr08": dict(threshold=0.8),
    "wide": dict(d_model=256, d_mlp=256, heads=8, lr=1e-3),
    "lr4e3": dict(lr=4e-3),
    "b64": dict(batch=64),
    "fast": dict(rope_base=500.0, threshold=0.8),  # copy_2d_rope.ROPE2_RECIPE
    "wide_long": dict(d_model=256, d_mlp=256, heads=8, lr=1e-3),  # ``wide``, its own rows for a longer run
}
SETTINGS = ["heads", "d_model", "d_mlp", "rope_base", "lr", "batch", "curriculum", "threshold"]


def spec(name: str, recipe: dict, steps: int, s: dict) -> tuple:
    """``copy_2d_rope.train_one``'s spec of the 2-layer RoPE copier under ``recipe`` (``BASE`` overridden)."""
    r = {**BASE, **recipe}
    extra = {k: v for k, v in r.items() if k not in ("heads", "lr", "curriculum")}
    return ("rope", 2, r["heads"], "imbalanced", steps, r["curriculum"], r["lr"], extra)


def settings(recipe: dict, s: dict) -> dict:
    """The recipe's value of every ``SETTINGS`` column (defaults of ``BASE`` and ``s`` filled in)."""
    r = {**BASE, **recipe}
    return dict(heads=r["heads"], d_model=r.get("d_model", s["d_model"]), d_mlp=r.get("d_mlp", s["d_mlp"]),
                rope_base=r.get("rope_base", 1e4), lr=r["lr"], batch=r.get("batch", s["batch"]), curriculum=r["curriculum"],
                threshold=r.get("threshold", 0.9) if r["curriculum"] else np.nan)


def run_recipe(job: tuple) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Train one recipe (worker process): its test curve (``copy_attempts.csv`` rows) and loss curve."""
    name, recipe, steps, s, seed, eval_every, test = job
    sp = spec(name, recipe, steps, s)
    sp[7].update(eval_every=eval_every, eval=test)
    res = c2d.train_one((sp, s, seed, {}))
    ev = res["evals"].rename(columns={"eval_step": "step", "eval_exact_match": "exact_match"})
    ev = ev.assign(recipe=name, seed=seed, final_hi=res["final_hi"], final_loss=res["final_loss"], **settings(recipe, s))
    curve = res["curve"].assign(recipe=name)[["recipe", "seed", "step", "loss", "batch_exact_match", "hi"]]
    print(f"{name} seed {seed}: {steps} steps in {res['t_train']:.0f} s, curriculum reached {res['final_hi']}, "
          f"final loss {res['final_loss']:.4f}, exact match 1-{s['train_hi']}: {ev.exact_match.iloc[-1]:.3f}", flush=True)
    return ev[["recipe", "seed", "step", "exact_match", "seconds", "final_hi", "final_loss"] + SETTINGS], curve


def _merge(path: Path, new: pd.DataFrame) -> pd.DataFrame:
    """Replace ``path``'s rows of the recipes (and seeds) in ``new`` by ``new`` (under an exclusive lock)."""
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if path.exists():
            new = replace_rows(pd.read_csv(path), new, ["recipe", "seed"])
        order = {r: i for i, r in enumerate(RECIPES)}
        new = new.sort_values(["recipe", "seed", "step"], key=lambda c: c.map(order) if c.name == "recipe" else c, kind="stable")
        new.to_csv(path, index=False)
    path.with_suffix(".lock").unlink(missing_ok=True)
    return new


def figure(ev: pd.DataFrame, curves: pd.DataFrame, train_hi: int) -> go.Figure:
    """Test exact match on 1-``train_hi``, training loss and curriculum length against the step, one line per recipe."""
    fig = make_subplots(rows=1, cols=3, subplot_titles=[f"test exact match, Imbalanced 1-{train_hi}", "training loss (nats per target token)",
                                                        "curriculum: longest training length"])
    for i, ((name, seed), d) in enumerate(ev.groupby(["recipe", "seed"], sort=False)):
        c = curves[(curves.recipe == name) & (curves.seed == seed)]
        color = f"hsl({(i * 53) % 360}, 70%, 45%)"
        label = f"{name} (seed {seed})"
        fig.add_trace(go.Scatter(x=d.step, y=d.exact_match, mode="lines+markers", name=label, legendgroup=label,
                                 line=dict(color=color)), 1, 1)
        for col, k in (("loss", 2), ("hi", 3)):
            fig.add_trace(go.Scatter(x=c.step, y=c[col], mode="lines", name=label, legendgroup=label, showlegend=False,
                                     line=dict(color=color)), 1, k)
    fig.add_hline(y=0.9, line_dash="dot", row=1, col=1)
    fig.update_yaxes(range=[-0.03, 1.03], row=1, col=1)
    fig.update_yaxes(type="log", row=1, col=2)
    fig.update_xaxes(title="step")
    fig.update_layout(title="2-layer RoPE copier (paper 000): training recipes", height=430, width=1500)
    return fig


def main(argv: list[str] | None = None) -> pd.DataFrame:
    """Command-line entry (module docstring); returns the merged ``copy_attempts.csv`` table."""
    ap = parser(__doc__, "tiny models, 20 steps, lengths up to 8 (seconds)")
    ap.add_argument("--recipes", nargs="+", default=list(RECIPES), choices=list(RECIPES))
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--eval-every", type=int, default=250)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=2, help="worker processes (each one torch thread); 1: in this process")
    args = ap.parse_args(argv)
    s = c2d.QUICK if args.quick else c2d.FULL
    steps, every = (20, 10) if args.quick else (args.steps, args.eval_every)
    recipes = {k: RECIPES[k] for k in (["base", "wide"] if args.quick else args.recipes)}
    if args.quick:
        recipes = {"base": {}, "wide": dict(d_model=64, d_mlp=64, heads=4, lr=1e-3)}
    args.out.mkdir(parents=True, exist_ok=True)
    test_bin = (1, s["train_hi"], s["bins"][0][2])  # copy_2d_rope's first bin: (1, 64, 200) in full mode
    test = sample_strings("imbalanced", test_bin[2], 1, test_bin[1], np.random.default_rng([args.seed, 1001, 0]))
    work = [(name, r, steps, s, args.seed, every, test) for name, r in recipes.items()]
    t0 = time.perf_counter()
    with one_thread():
        if args.jobs > 1 and len(work) > 1:
            with mp.get_context("fork").Pool(min(args.jobs, len(work))) as pool:
                out = pool.map(run_recipe, work, chunksize=1)
        else:
            out = [run_recipe(w) for w in work]
    ev = _merge(args.out / "copy_attempts.csv", pd.concat([o[0] for o in out], ignore_index=True))
    curves = _merge(args.out / "copy_attempts_loss.csv", pd.concat([o[1] for o in out], ignore_index=True))
    save_figure(figure(ev, curves, s["train_hi"]), args.out, "copy_attempts")
    print(f"total {time.perf_counter() - t0:.0f} s", flush=True)
    return ev


if __name__ == "__main__":
    main()
