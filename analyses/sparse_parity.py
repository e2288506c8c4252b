"""Sparsity and length generalisation (paper 003, Sec. 5.1 / 5.2.1, Figs. 1a, 1b, 3, 4), scaled down to CPU.

1. Sparse parity (003 Sec. 5.1, App. E.1): a RoPE decoder trained with PoSE ids (2 chunks, L_max = 510) on
   ``2l`` uniform in [20, 50] and ``k ~ Unif[1..K_train]``, ``K_train = 4``, predicting only the last token; tested
   with true ids on ``2l`` up to 500 and ``k_test = 1..8``. Accuracy by (k_test, length bin) ->
   ``sparse_parity.csv`` (``k_train, k_test, length_lo, length_hi, accuracy``).
2. Parity with scratchpad (003 Sec. 5.2.1, App. E.2): jumps ``k = 1..4``, ``2l`` in [10, 40] for training and up
   to 200 for testing; Predictive Position Coupling (learned absolute embeddings of coupled ids shifted by a
   random offset, an extra head predicting the next id, fed back at test) against the baseline of App. E.2.2 (a),
   absolute embeddings with a random offset and no coupling. Exact match of the whole scratchpad (and, for PPC,
   of all predicted ids) -> ``ppc.csv`` (``method, jump, length_lo, length_hi, exact_match``).

Scaled down from the paper (12 layers, d = 1024, 50,000 steps, lr 5e-5): 2-layer decoders with d_model = 64,
4 heads, batch 64; sparse parity 3,500 steps at lr 3e-3; each scratchpad model up to 1,000 curriculum steps plus
800 steps at lr 1e-2; 128 / 64 test points per cell. Sparse parity uses partial RoPE (the 25% highest-frequency
planes rotate, the rest are position-free) like GPT-NeoX's default ``rotary_pct = 0.25`` (003 builds on GPT-NeoX);
full RoPE learned about 2x slower here. Curricula (the paper has none), needed to learn anything in this budget:
sparse parity raises ``K`` from 1 to ``K_train`` each time a probe at the current maximum reaches 90% (then
trains on the paper's law, ``k ~ Unif[1..K_train]``); the scratchpad models go through jumps 1, 2, ..., k at
offset 0 the same way, then get the same 800 steps of the paper's law with the offset range widening linearly to
the paper's over the first 40%. The id range is ``ppc.l_max_for``: 210 for the uncoupled ``k = 1`` as in 003
Table 2, but only ``l/k + 10`` for coupled ids, which never go higher at test. The 9 trainings run in
``--workers`` processes (default 2).

    python analyses/sparse_parity.py [--quick] [--out DIR] [--seed 0]
"""

from __future__ import annotations

import sys
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import one_thread, parser, save_figure  # noqa: E402
from interp.lab import LabConfig, LabForCausalLM, TrainConfig, train_model  # noqa: E402
from interp.lab import parity as sp  # noqa: E402
from interp.lab import ppc  # noqa: E402

K_TRAIN = 4
SP_TRAIN_ELL = (10, 25)  # 2l in [20, 50]
SP_BINS = [(20, 50), (52, 100), (102, 200), (202, 300), (302, 400), (402, 500)]  # 2l, inclusive
PPC_TRAIN_ELL = (5, 20)  # 2l in [10, 40]
PPC_BINS = [(10, 40), (42, 80), (82, 120), (122, 160), (162, 200)]
JUMPS = (1, 2, 3, 4)
SP_PE = "partial"  # GPT-NeoX's default rotary_pct = 0.25 (README paragraph); "rope" learned ~2x slower here
PPC_LAYERS = 2  # 1 layer left jumps >= 2 stuck in the curriculum

FULL = dict(sp_steps=3500, sp_test=128, ppc_steps=800, ppc_curriculum=1000, ppc_chunk=100, ppc_test=64, probe_every=50)
QUICK = dict(sp_steps=20, sp_test=4, ppc_steps=6, ppc_curriculum=4, ppc_chunk=2, ppc_test=4, probe_every=10)


def train_sparse_parity(steps: int, seed: int, probe_every: int, quick: bool, pe: str = "rope", n_heads: int = 4,
                        lr: float = 3e-3, chunks: int = 2) -> tuple[LabForCausalLM, list[int]]:
    """A RoPE decoder trained on sparse parity with PoSE ids and the adaptive K curriculum (module docstring).

    ``pe``: the lab's position encoding (``"rope"`` or ``"partial"``, 25% of the planes); ``n_heads`` of width
    ``64 / n_heads``; ``lr``: peak learning rate; ``chunks``: PoSE chunks. Returns the model (eval mode) and the
    steps at which the curriculum's ``K`` reached 2, 3, ..., K_train.
    """
    ids = sp.SparseParityIds(sp.N_DEFAULT)
    torch.manual_seed(seed)
    model = LabForCausalLM(LabConfig(vocab_size=ids.vocab_size, n_layers=2, n_heads=n_heads, d_model=64, d_mlp=128, pe=pe,
                                     partial_fraction=0.25, max_positions=sp.L_MAX))
    state = dict(k_max=1, raised=[])
    probe_rng = np.random.default_rng(seed + 1000)

    def batch_fn(step, rng):
        if step and step % probe_every == 0 and state["k_max"] < K_TRAIN:
            model.eval()
            acc = sp.sparse_parity_accuracy(model, probe_rng, SP_TRAIN_ELL, state["k_max"], 128, ids)
            model.train()
            if acc >= 0.9:
                state["k_max"] += 1
                state["raised"].append(step)
        return sp.sparse_parity_batch(rng, 64, SP_TRAIN_ELL, (1, state["k_max"]), ids, pose=True, chunks=chunks)

    train_model(model, batch_fn, TrainConfig(steps=steps, lr=lr, warmup=100, seed=seed, log_every=0 if quick else 500))
    return model, state["raised"]


def sparse_parity_table(model, n_test: int, seed: int) -> pd.DataFrame:
    ids = sp.SparseParityIds(sp.N_DEFAULT)
    rng = np.random.default_rng(seed + 1)
    rows = []
    for k in range(1, 9):
        for lo, hi in SP_BINS:
            acc = sp.sparse_parity_accuracy(model, rng, (lo // 2, hi // 2), k, n_test, ids)
            rows.append(dict(k_train=K_TRAIN, k_test=k, length_lo=lo, length_hi=hi, accuracy=acc))
    return pd.DataFrame(rows)


def train_scratchpad(method: str, jump: int, cfg: dict, seed: int, n_layers: int = 2):
    """PPC (``method="ppc"``) or the absolute-PE baseline (``"absolute"``) on parity with scratchpad, one jump.

    Learned absolute embeddings over ``ppc.l_max_for`` ids, ``n_layers`` layers, d_model 64, lr 1e-2, two stages:

    1. curriculum at offset 0, in chunks of ``cfg["ppc_chunk"]`` steps at constant lr: jumps 1, 2, ..., ``jump``,
       each until a probe of 64 training-length inputs is >= 90% exact, at most ``cfg["ppc_curriculum"]`` steps;
    2. ``cfg["ppc_steps"]`` steps of warmup + cosine with the paper's training law, the offset cap widening linearly
       from 0 to the full range over the first 40% (every model gets the same budget here, however long stage 1 took).

    Returns:
        (model in eval mode, l_max, the stage-1 steps at which the curriculum moved on, whether it finished).
    """
    coupled = method == "ppc"
    l_max = ppc.l_max_for(PPC_BINS[-1][1] // 2 // jump * jump, jump, coupled)
    torch.manual_seed(seed)
    lm = LabForCausalLM(LabConfig(vocab_size=ppc.VOCAB_SIZE, n_layers=n_layers, n_heads=4, d_model=64, d_mlp=128, pe="learned",
                                  max_positions=l_max))
    model = ppc.PPCModel(lm, l_max) if coupled else lm
    train = ppc.train_ppc if coupled else train_model
    probe_rng = np.random.default_rng(seed + 2000)
    cur, moved, done, step = 1, [], False, 0
    while step < cfg["ppc_curriculum"] and not done:
        tc = TrainConfig(steps=cfg["ppc_chunk"], lr=1e-2, warmup=min(10, cfg["ppc_chunk"]), min_lr_frac=1.0, seed=seed + step)
        train(model, lambda s, rng, j=cur: ppc.ppc_batch(rng, 64, PPC_TRAIN_ELL, j, coupled=coupled, l_max=l_max, shift=False), tc)
        step += cfg["ppc_chunk"]
        while not done and ppc.exact_match(model, probe_rng, PPC_TRAIN_ELL, cur, 64, coupled, l_max=l_max) >= 0.9:
            moved.append(step)
            done = cur == jump
            cur = min(jump, cur + 1)
    ramp = max(1, int(0.4 * cfg["ppc_steps"]))

    def batch_fn(s, rng):
        return ppc.ppc_batch(rng, 64, PPC_TRAIN_ELL, jump, coupled=coupled, l_max=l_max, max_offset=l_max * s // ramp)

    train(model, batch_fn, TrainConfig(steps=cfg["ppc_steps"], lr=1e-2, warmup=min(50, cfg["ppc_steps"] // 5), seed=seed))
    return model, l_max, moved, done


def run_job(job: tuple, cfg: dict, seed: int, quick: bool) -> tuple[pd.DataFrame, str]:
    """One independent training + evaluation: ``("sparse_parity",)`` or ``("scratchpad", method, jump)``.

    One torch thread (tiny matmuls); returns its rows and a line saying what the curriculum did and how long it took.
    """
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    if job[0] == "sparse_parity":
        model, raised = train_sparse_parity(cfg["sp_steps"], seed, cfg["probe_every"], quick, pe=SP_PE)
        df = sparse_parity_table(model, cfg["sp_test"], seed)
        return df, f"sparse parity ({SP_PE}): K curriculum raised at steps {raised}; {time.perf_counter() - t0:.0f} s"
    _, method, jump = job
    model, l_max, moved, done = train_scratchpad(method, jump, cfg, seed, n_layers=PPC_LAYERS)
    rng = np.random.default_rng(seed + 2)
    rows = []
    for lo, hi in PPC_BINS:
        em = ppc.exact_match(model, rng, (lo // 2, hi // 2), jump, cfg["ppc_test"], coupled=method == "ppc", l_max=l_max)
        rows.append(dict(method=method, jump=jump, length_lo=lo, length_hi=hi, exact_match=em))
    what = "finished" if done else f"did not finish (stopped at jump {min(jump, len(moved) + 1)})"
    return pd.DataFrame(rows), (f"{method} jump {jump}: L_max {l_max}; curriculum (jumps 1..{jump} at offset 0) passed its probes "
                                f"after steps {moved}, {what}; {time.perf_counter() - t0:.0f} s")


def figure(a: pd.DataFrame, b: pd.DataFrame) -> go.Figure:
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.14, subplot_titles=[f"sparse parity, RoPE ({SP_PE}) + PoSE, K_train = {K_TRAIN}: accuracy (003 Fig. 3)",
                                                        "parity with scratchpad: exact match (003 Fig. 1b / 4a)"])
    piv = a.pivot(index="k_test", columns="length_hi", values="accuracy")
    fig.add_trace(go.Heatmap(z=piv.values, x=[f"{lo}-{hi}" for lo, hi in SP_BINS], y=piv.index, zmin=0.5, zmax=1,
                             colorscale="Viridis", text=np.round(piv.values, 2), texttemplate="%{text}",
                             colorbar=dict(title="accuracy", x=0.43)), 1, 1)
    colors = {1: "#1f77b4", 2: "#ff7f0e", 3: "#2ca02c", 4: "#d62728"}
    for (method, jump), d in b.groupby(["method", "jump"]):
        fig.add_trace(go.Scatter(x=(d.length_lo + d.length_hi) / 2, y=d.exact_match, name=f"{method}, jump {jump}",
                                 mode="lines+markers", line=dict(color=colors[jump], dash="solid" if method == "ppc" else "dash")), 1, 2)
    fig.add_vrect(x0=10, x1=40, fillcolor="#888", opacity=0.15, line_width=0, row=1, col=2)
    fig.update_xaxes(title="test length 2l", row=1, col=1)
    fig.update_yaxes(title="k_test", dtick=1, row=1, col=1)
    fig.update_xaxes(title="test length 2l (grey: training lengths)", row=1, col=2)
    fig.update_yaxes(title="exact match", range=[-0.02, 1.02], row=1, col=2)
    fig.update_layout(height=450, width=1250, title="Sparsity and length generalisation (paper 003), scaled down")
    return fig


def main(argv: list[str] | None = None) -> pd.DataFrame:
    ap = parser(__doc__, "a few steps and test points per cell (seconds)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=2, help="processes for the 9 independent trainings (quick: 1)")
    args = ap.parse_args(argv)
    cfg = QUICK if args.quick else FULL
    args.out.mkdir(parents=True, exist_ok=True)
    jobs = [("sparse_parity",)] + [("scratchpad", m, j) for j in JUMPS for m in ("ppc", "absolute")]
    t0 = time.perf_counter()
    if args.quick or args.workers <= 1:
        with one_thread():
            results = [run_job(j, cfg, args.seed, args.quick) for j in jobs]
    else:  # independent models: one process per core beats intra-op threads on matmuls this small
        with ProcessPoolExecutor(args.workers, mp_context=get_context("spawn")) as ex:
            results = list(ex.map(run_job, jobs, [cfg] * len(jobs), [args.seed] * len(jobs), [args.quick] * len(jobs)))
    a = results[0][0]
    b = pd.concat([r[0] for r in results[1:]], ignore_index=True)
    a.to_csv(args.out / "sparse_parity.csv", index=False)
    b.to_csv(args.out / "ppc.csv", index=False)
    for _, line in results:
        print(line)
    print("sparse parity accuracy (rows k_test, columns: upper end of the 2l bin):")
    print(a.pivot(index="k_test", columns="length_hi", values="accuracy").round(2).to_string())
    print("parity with scratchpad, exact match:")
    print(b.pivot_table(index=["method", "jump"], columns="length_hi", values="exact_match").round(2).to_string())
    print(f"total {time.perf_counter() - t0:.0f} s")
    save_figure(figure(a, b), args.out, "sparse_parity")
    return pd.concat([a.assign(table="sparse_parity"), b.assign(table="ppc")], ignore_index=True)


if __name__ == "__main__":
    main()
