"""Scratchpad tasks under Predictive Position Coupling and their baselines (paper 003, Sec. 5.2, Figs. 1b, 1c, 4, 5a),
scaled down to CPU, over several seeds.

1. Parity with scratchpad (003 Sec. 5.2.1, App. E.2): jumps ``k = 1..4``, ``2l`` in [10, 40] for training and up to
   200 for testing. Methods: ``ppc`` (learned absolute embeddings of coupled ids shifted by a random offset, a head
   predicting the next id, fed back at test; Fig. 1b), ``absolute`` (the same embeddings of ``arange(n)`` with a random
   offset, no coupling; Fig. 4a) and ``rope_pose`` (RoPE with PoSE ids, 2 chunks over ``L_max = 210``, true ids at
   test, no coupling; Fig. 4b).
2. Variable assignment with scratchpad (003 Sec. 5.2.2, App. E.3; ``interp.lab.variable_assignment``): depths
   ``d = 2..5``, 200 variables, input length ``l`` in [20, 60] for training and up to 200 for testing. Methods
   ``ppc`` (Fig. 1c) and ``absolute`` (Fig. 5a).

Metric: exact match of the whole scratchpad (and, for PPC, of all predicted ids), by teacher forcing, which equals
greedy generation with fed-back predictions (``interp.lab.ppc.teacher_forced_exact``). -> ``ppc.csv`` (``task,
method, jump, depth, length_lo, length_hi, exact_match, seed``; ``jump`` is empty for variable assignment, ``depth``
for parity; lengths are ``2l`` for parity and ``l`` for variable assignment).

Scaled down from the paper (12-layer GPT-NeoX, d = 1024, 50,000 steps at batch 64 / 32, 192 test points, 10 / 3 runs):
2-layer decoders with d_model = 64, 4 heads, lr 1e-2 (parity) / 3e-3 (variable assignment: at 1e-2 not even
depth 1 was learned in 1,000 steps, 3 seeds), two stages per model (parity: ``curriculum`` = 1,000, ``steps`` = 800;
variable assignment: 6,000 and 1,500; a cap of 1,000 ended before depth 1 was learned and left every model at
depth 1):

1. a curriculum at offset 0 (true ids for ``rope_pose``), in chunks of ``chunk`` steps at constant lr: jumps (depths)
   1, 2, ..., k, each until a probe of 64 training-length inputs is >= 90% exact, at most ``curriculum`` steps (the
   paper has none; without it nothing was learned in this budget);
2. ``steps`` steps of warmup + cosine on the paper's training law, the offset cap (for ``rope_pose``: the PoSE id
   range) widening linearly from 0 to the full range over the first 40% (every model gets this budget however long
   stage 1 took).

The id range is ``l_max_for`` of the task: the largest id a test uses + 9 (003 Tables 2 / 3: 210 / 230); coupled ids
need far fewer, so the random training offsets spread over the ids a test can use. ``rope_pose`` uses partial RoPE
(25% of the planes, GPT-NeoX's default ``rotary_pct``) like ``sparse_parity.py``. The trainings run in ``--workers``
processes (default 2), one torch thread each.

    python -m analyses.p003_sparsity.ppc_scratchpad [--quick] [--out DIR] [--seeds 0 1 2] [--tasks parity va] [--levels ..]
        [--methods ppc absolute rope_pose] [--workers 2]
"""

from __future__ import annotations

import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from multiprocessing import get_context
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots

from interp.lab import LabConfig, LabForCausalLM, TrainConfig, train_model
from interp.lab import parity as sp
from interp.lab import ppc
from interp.lab import variable_assignment as va

from analyses._common import one_thread, parser, save_figure

METHODS = {"parity": ("ppc", "absolute", "rope_pose"), "va": ("ppc", "absolute")}
LEVELS = {"parity": (1, 2, 3, 4), "va": (2, 3, 4, 5)}  # jumps k / depths d
COLUMNS = ["task", "method", "jump", "depth", "length_lo", "length_hi", "exact_match", "seed"]
ROPE_PE = "partial"  # as sparse_parity.py (GPT-NeoX's rotary_pct = 0.25)


class Task(NamedTuple):
    """One scratchpad task: training range of ``l``, test bins (in the paper's length unit), batch size, and the
    ``interp.lab`` functions that draw batches and size the id range."""

    name: str
    train_ell: tuple[int, int]
    bins: tuple[tuple[int, int], ...]  # (lo, hi) in the unit of ``unit``
    unit: int  # the bin unit is ``unit * l`` (2l for parity, l for variable assignment)
    batch_size: int
    vocab_size: int
    lr: float  # peak learning rate of both stages

    def batch(self, rng, size, ell_range, level, coupled, l_max, shift=True, max_offset=None) -> dict:
        if self.name == "parity":
            return ppc.ppc_batch(rng, size, ell_range, level, coupled=coupled, l_max=l_max, shift=shift, max_offset=max_offset)
        return va.va_batch(rng, size, ell_range, level, coupled=coupled, l_max=l_max, shift=shift, max_offset=max_offset)

    def l_max(self, level: int, coupled: bool) -> int:
        top = self.bins[-1][1] // self.unit
        if self.name == "parity":
            return ppc.l_max_for(top // level * level, level, coupled)
        return va.l_max_for(top, level, coupled)


TASKS = {"parity": Task("parity", (5, 20), ((10, 40), (42, 80), (82, 120), (122, 160), (162, 200)), 2, 64, ppc.VOCAB_SIZE, 1e-2),
         "va": Task("va", (20, 60), ((20, 60), (61, 100), (101, 150), (151, 200)), 1, 32, va.vocab_size(), 3e-3)}
FULL = dict(steps=800, curriculum=1000, chunk=100, test=64, probe=64, seeds=(0, 1, 2), levels=LEVELS,
            budget={"va": dict(curriculum=6000, steps=1500)})  # per task: overrides steps / curriculum
QUICK = dict(steps=4, curriculum=2, chunk=2, test=4, probe=8, seeds=(0, 1), levels={"parity": (1,), "va": (2,)})


def pose_ids(batch: dict, rng: np.random.Generator, l_max: int, cap: int) -> dict:
    """Replace each row's ids by PoSE ids (``interp.lab.parity.pose_position_ids``, 2 chunks) over ``min(l_max, n +
    cap)`` ids, ``n`` the row's length without pads; pads continue the last id. Returns a new dict (input unchanged)."""
    pos = batch["position_ids"].clone()
    n_real = (batch["input_ids"] != 0).sum(1)
    for r, n in enumerate(n_real.tolist()):
        p = sp.pose_position_ids(rng, n, min(l_max, n + cap), chunks=2)
        pos[r, :n] = torch.from_numpy(p)
        pos[r, n:] = torch.clamp(p[-1] + 1 + torch.arange(pos.shape[1] - n), max=l_max - 1)
    return dict(batch, position_ids=pos)


def train_scratchpad(task: Task, method: str, level: int, cfg: dict, seed: int, n_layers: int = 2):
    """Train one model (``method`` in ``METHODS[task.name]``, jump / depth ``level``) by the two stages of the module
    docstring.

    Returns:
        (model in eval mode, l_max, the stage-1 steps at which the curriculum moved on, whether it finished).
    """
    coupled = method == "ppc"
    l_max = task.l_max(level, coupled)
    torch.manual_seed(seed)
    pe = ROPE_PE if method == "rope_pose" else "learned"
    lm = LabForCausalLM(LabConfig(vocab_size=task.vocab_size, n_layers=n_layers, n_heads=4, d_model=64, d_mlp=128, pe=pe,
                                  partial_fraction=0.25, max_positions=l_max))
    model = ppc.PPCModel(lm, l_max) if coupled else lm
    train = ppc.train_ppc if coupled else train_model
    probe_rng = np.random.default_rng(seed + 2000)
    first = 1
    cur, moved, done, step = first, [], False, 0
    while step < cfg["curriculum"] and not done:
        tc = TrainConfig(steps=cfg["chunk"], lr=task.lr, warmup=min(10, cfg["chunk"]), min_lr_frac=1.0, seed=seed + step)
        train(model, lambda s, rng, j=cur: task.batch(rng, task.batch_size, task.train_ell, j, coupled, l_max, shift=False), tc)
        step += cfg["chunk"]
        while not done and exact(task, model, probe_rng, task.train_ell, cur, cfg["probe"], coupled, l_max) >= 0.9:
            moved.append(step)
            done = cur == level
            cur = min(level, cur + 1)
    ramp = max(1, int(0.4 * cfg["steps"]))

    def batch_fn(s, rng):
        cap = l_max * s // ramp
        if method == "rope_pose":
            return pose_ids(task.batch(rng, task.batch_size, task.train_ell, level, False, l_max, shift=False), rng, l_max, cap)
        return task.batch(rng, task.batch_size, task.train_ell, level, coupled, l_max, max_offset=cap)

    train(model, batch_fn, TrainConfig(steps=cfg["steps"], lr=task.lr, warmup=min(50, cfg["steps"] // 5), seed=seed))
    return model, l_max, moved, done


def exact(task: Task, model, rng, ell_range, level, n, coupled, l_max) -> float:
    """Exact match at offset 0 (true ids) of ``n`` inputs with ``l`` in ``ell_range``."""
    return ppc.exact_match_of(model, lambda b: task.batch(rng, b, ell_range, level, coupled, l_max, shift=False), n)


def run_job(job: tuple, cfg: dict) -> tuple[pd.DataFrame, str]:
    """One training + evaluation ``(task, method, level, seed)`` on one torch thread; returns its rows and a log line."""
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    name, method, level, seed = job
    cfg = {**cfg, **cfg.get("budget", {}).get(name, {})}
    task = TASKS[name]
    model, l_max, moved, done = train_scratchpad(task, method, level, cfg, seed)
    rng = np.random.default_rng(seed + 2)
    rows = []
    for lo, hi in task.bins:
        ell_range = (-(-lo // task.unit), hi // task.unit)
        if name == "parity":
            ell_range = (-(-ell_range[0] // level) * level, ell_range[1])
        em = exact(task, model, rng, ell_range, level, cfg["test"], method == "ppc", l_max)
        rows.append(dict(task=name, method=method, jump=level if name == "parity" else None,
                         depth=level if name == "va" else None, length_lo=lo, length_hi=hi, exact_match=em, seed=seed))
    what = "finished" if done else f"did not finish (stopped at level {min(level, len(moved) + 1)})"
    unit = "jump" if name == "parity" else "depth"
    return pd.DataFrame(rows, columns=COLUMNS), (f"{name} {method} {unit} {level} seed {seed}: L_max {l_max}; curriculum "
                                                 f"passed its probes after steps {moved}, {what}; {time.perf_counter() - t0:.0f} s")


def summary(df: pd.DataFrame) -> pd.DataFrame:
    """Mean and sample standard deviation of exact match over seeds, per (task, method, jump / depth, length bin)."""
    key = df.assign(level=df.jump.astype(float).fillna(df.depth.astype(float)).astype(int))
    return (key.groupby(["task", "method", "level", "length_lo", "length_hi"], sort=False).exact_match
            .agg(mean="mean", std="std", n="count").reset_index())


def figure(df: pd.DataFrame) -> go.Figure:
    """Exact match against test length: mean over seeds with a +-1 sd band; one panel per task and method."""
    s = summary(df)
    panels = [(t, m) for t in METHODS for m in METHODS[t]]
    titles = {("parity", "ppc"): "parity, PPC (003 Fig. 1b)", ("parity", "absolute"): "parity, absolute PE (Fig. 4a)",
              ("parity", "rope_pose"): "parity, RoPE + PoSE (Fig. 4b)", ("va", "ppc"): "var. assignment, PPC (Fig. 1c)",
              ("va", "absolute"): "var. assignment, absolute PE (Fig. 5a)"}
    fig = make_subplots(rows=1, cols=len(panels), subplot_titles=[titles[p] for p in panels], horizontal_spacing=0.03)
    colors = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728"]
    for c, (t, m) in enumerate(panels, 1):
        d = s[(s.task == t) & (s.method == m)]
        for i, (lev, g) in enumerate(d.groupby("level")):
            x = (g.length_lo + g.length_hi) / 2
            sd = g["std"].fillna(0)
            fig.add_trace(go.Scatter(x=list(x) + list(x[::-1]), y=list((g["mean"] + sd).clip(upper=1)) + list((g["mean"] - sd).clip(lower=0)[::-1]),
                                     fill="toself", fillcolor=colors[i], opacity=0.15, line=dict(width=0), showlegend=False), 1, c)
            fig.add_trace(go.Scatter(x=x, y=g["mean"], mode="lines+markers", line=dict(color=colors[i]),
                                     name=f"{'jump' if t == 'parity' else 'depth'} {lev}", legendgroup=f"{t}{lev}",
                                     showlegend=m == METHODS[t][0]), 1, c)
        tr = TASKS[t].train_ell
        fig.add_vrect(x0=tr[0] * TASKS[t].unit, x1=tr[1] * TASKS[t].unit, fillcolor="#888", opacity=0.15, line_width=0, row=1, col=c)
        fig.update_xaxes(title="test length " + ("2l" if t == "parity" else "l"), row=1, col=c)
        fig.update_yaxes(range=[-0.02, 1.02], showticklabels=c == 1, row=1, col=c)
    fig.update_yaxes(title="exact match (mean +- sd over seeds)", row=1, col=1)
    fig.update_layout(height=420, width=1700, title="Scratchpad length generalisation (paper 003 Sec. 5.2), scaled down; grey: training lengths")
    return fig


def job_order(cfg: dict, seeds, tasks) -> list[tuple]:
    """``(task, method, level, seed)`` jobs, the new comparisons first, seed by seed: variable assignment (PPC) at the
    first depth, parity with RoPE + PoSE at jump 1, variable assignment (absolute PE); then parity PPC / absolute PE
    at jump 1; then the remaining levels."""
    lev = {t: cfg["levels"][t] for t in METHODS if t in tasks and cfg["levels"][t]}
    new = [(t, m, lev[t][0]) for t, m in (("va", "ppc"), ("parity", "rope_pose"), ("va", "absolute")) if t in lev]
    old = [("parity", m, lev["parity"][0]) for m in ("ppc", "absolute") if "parity" in lev]
    rest = [(t, m, x) for t in ("va", "parity") if t in lev for x in lev[t][1:] for m in METHODS[t]]
    order = [(*c, s) for group in (new, old) for s in seeds for c in group] + [(*c, s) for c in rest for s in seeds]
    return [j for j in order if j[0] in tasks]


def _key(df: pd.DataFrame) -> pd.Series:
    return df.task + "/" + df.method + "/" + df.jump.astype(float).fillna(df.depth.astype(float)).astype(int).astype(str) + "/" + df.seed.astype(str)


def _save(df: pd.DataFrame, path: Path) -> pd.DataFrame:
    df = df.copy()
    df["jump"], df["depth"] = df.jump.astype("Int64"), df.depth.astype("Int64")
    df = df.sort_values(["task", "method", "jump", "depth", "seed", "length_lo"], kind="stable", ignore_index=True)
    df[COLUMNS].to_csv(path, index=False)
    return df


def main(argv: list[str] | None = None) -> pd.DataFrame:
    ap = parser(__doc__, "a few steps and test points per cell, one jump / depth, 2 seeds (seconds)")
    ap.add_argument("--seeds", type=int, nargs="+", default=None, help="training seeds (default 0 1 2; quick: 0 1)")
    ap.add_argument("--tasks", nargs="+", default=list(METHODS), choices=list(METHODS))
    ap.add_argument("--levels", type=int, nargs="+", default=None, help="only these jumps (parity) / depths (variable "
                    "assignment); default all")
    ap.add_argument("--methods", nargs="+", default=None, help="only these methods (ppc, absolute, rope_pose); default all")
    ap.add_argument("--workers", type=int, default=2, help="processes for the independent trainings (quick: 1)")
    ap.add_argument("--fresh", action="store_true", help="retrain every job (default: keep the rows of jobs already in "
                    "OUT/ppc.csv; each finished job is saved at once, so an interrupted run resumes)")
    args = ap.parse_args(argv)
    cfg = dict(QUICK if args.quick else FULL)
    seeds = args.seeds if args.seeds is not None else cfg["seeds"]
    if args.levels is not None:
        cfg["levels"] = {t: tuple(lev for lev in cfg["levels"][t] if lev in args.levels) for t in cfg["levels"]}
        args.tasks = [t for t in args.tasks if cfg["levels"][t]]
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "ppc.csv"
    done = pd.read_csv(path) if path.exists() and not args.fresh else pd.DataFrame(columns=COLUMNS)
    if list(done.columns) != COLUMNS:
        raise ValueError(f"{path} has columns {list(done.columns)}, not {COLUMNS}; pass --fresh to overwrite it")
    have = set(_key(done)) if len(done) else set()
    jobs = [j for j in job_order(cfg, seeds, args.tasks) if f"{j[0]}/{j[1]}/{j[2]}/{j[3]}" not in have
            and (args.methods is None or j[1] in args.methods)]
    print(f"{len(jobs)} trainings to run ({len(have)} kept from {path})")
    t0 = time.perf_counter()
    frames, lines = [done], []

    def merged() -> pd.DataFrame:
        """This run's rows plus the rows another run saved meanwhile for other jobs (runs may go side by side)."""
        mine = pd.concat(frames, ignore_index=True)
        disk = pd.read_csv(path) if path.exists() else mine.iloc[:0]
        return pd.concat([disk[~_key(disk).isin(set(_key(mine)))], mine], ignore_index=True) if len(disk) else mine

    def collect(res):
        frames.append(res[0])
        lines.append(res[1])
        print(res[1], flush=True)
        _save(merged(), path)

    if args.quick or args.workers <= 1:
        with one_thread():
            for j in jobs:
                collect(run_job(j, cfg))
    else:  # independent models: one process per core beats intra-op threads on matmuls this small
        with ProcessPoolExecutor(args.workers, mp_context=get_context("spawn")) as ex:
            futures = [ex.submit(run_job, j, cfg) for j in jobs]
            for f in as_completed(futures):
                collect(f.result())
    df = _save(merged(), path)
    s = summary(df)
    s.rename(columns={"level": "jump_or_depth"}).round(4).to_csv(args.out / "ppc_summary.csv", index=False)
    s["cell"] = s["mean"].map("{:.2f}".format) + " +- " + s["std"].fillna(0).map("{:.2f}".format) + " (" + s["n"].astype(str) + ")"
    for t, g in s.groupby("task", sort=False):
        print(f"{t}: exact match, mean +- sd over (n) seeds (columns: upper end of the length bin):")
        print(g.pivot_table(index=["method", "level"], columns="length_hi", values="cell", aggfunc="first", sort=False).to_string())
    print(f"total {time.perf_counter() - t0:.0f} s")
    save_figure(figure(df), args.out, "ppc")
    return df


if __name__ == "__main__":
    main()
