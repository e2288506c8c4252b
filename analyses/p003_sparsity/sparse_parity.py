"""Sparse parity and length generalisation (paper 003, Sec. 5.1, Figs. 1a, 3), scaled down to CPU, over seeds.

Sparse parity (003 Sec. 5.1, App. E.1): a RoPE decoder trained with PoSE ids (2 chunks, L_max = 510) on ``2l``
uniform in [20, 50] and ``k ~ Unif[1..K_train]``, ``K_train = 4``, predicting only the last token; tested with true
ids on ``2l`` up to 500 and ``k_test = 1..8``. Accuracy by (k_test, length bin, seed) -> ``sparse_parity.csv``
(``k_train, k_test, length_lo, length_hi, accuracy, seed``). The scratchpad tasks of 003 Sec. 5.2 (``ppc.csv``) are
``analyses/p003_sparsity/ppc_scratchpad.py``.

Scaled down from the paper (12 layers, d = 1024, 50,000 steps, lr 5e-5): 2-layer decoders with d_model = 64,
4 heads, batch 64, 3,500 steps at lr 3e-3, 128 test points per cell. Partial RoPE (the 25% highest-frequency
planes rotate, the rest are position-free) like GPT-NeoX's default ``rotary_pct = 0.25`` (003 builds on GPT-NeoX);
full RoPE learned about 2x slower here. A curriculum (the paper has none), needed to learn anything in this budget,
raises ``K`` from 1 to ``K_train`` each time a probe at the current maximum reaches 90% (then trains on the paper's
law, ``k ~ Unif[1..K_train]``). One training per seed, in ``--workers`` processes (default 2).

``--k-train 1`` trains on ``k = 1`` only (the side run: does the smallest ``k`` alone reach further?). Rows of other
``(k_train, seed)`` already in ``OUT/sparse_parity.csv`` are kept, so seeds and ``K_train`` can be run in pieces;
``sparse_parity_summary.csv`` has the mean, sample sd and number of seeds per ``(k_train, k_test, bin)``.

    python -m analyses.p003_sparsity.sparse_parity [--quick] [--out DIR] [--seeds 0 1 2] [--k-train 4]
"""

from __future__ import annotations

import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import torch

from interp.lab import LabConfig, LabForCausalLM, TrainConfig, train_model
from interp.lab import parity as sp

from analyses._common import one_thread, parser, replace_rows, save_figure

K_TRAIN = 4
SP_TRAIN_ELL = (10, 25)  # 2l in [20, 50]
SP_BINS = [(20, 50), (52, 100), (102, 200), (202, 300), (302, 400), (402, 500)]  # 2l, inclusive
SP_PE = "partial"  # GPT-NeoX's default rotary_pct = 0.25 (README paragraph); "rope" learned ~2x slower here

FULL = dict(sp_steps=3500, sp_test=128, probe_every=50, seeds=(0, 1, 2))
QUICK = dict(sp_steps=20, sp_test=4, probe_every=10, seeds=(0,))


def train_sparse_parity(steps: int, seed: int, probe_every: int, quick: bool, pe: str = "rope", n_heads: int = 4,
                        lr: float = 3e-3, chunks: int = 2, k_train: int = K_TRAIN) -> tuple[LabForCausalLM, list[int]]:
    """A RoPE decoder trained on sparse parity with PoSE ids and the adaptive K curriculum (module docstring).

    ``pe``: the lab's position encoding (``"rope"`` or ``"partial"``, 25% of the planes); ``n_heads`` of width
    ``64 / n_heads``; ``lr``: peak learning rate; ``chunks``: PoSE chunks; ``k_train``: the largest ``k`` trained on.
    Returns the model (eval mode) and the steps at which the curriculum's ``K`` reached 2, 3, ..., ``k_train``.
    """
    ids = sp.SparseParityIds(sp.N_DEFAULT)
    torch.manual_seed(seed)
    model = LabForCausalLM(LabConfig(vocab_size=ids.vocab_size, n_layers=2, n_heads=n_heads, d_model=64, d_mlp=128, pe=pe,
                                     partial_fraction=0.25, max_positions=sp.L_MAX))
    state = dict(k_max=1, raised=[])
    probe_rng = np.random.default_rng(seed + 1000)

    def batch_fn(step, rng):
        if step and step % probe_every == 0 and state["k_max"] < k_train:
            model.eval()
            acc = sp.sparse_parity_accuracy(model, probe_rng, SP_TRAIN_ELL, state["k_max"], 128, ids)
            model.train()
            if acc >= 0.9:
                state["k_max"] += 1
                state["raised"].append(step)
        return sp.sparse_parity_batch(rng, 64, SP_TRAIN_ELL, (1, state["k_max"]), ids, pose=True, chunks=chunks)

    train_model(model, batch_fn, TrainConfig(steps=steps, lr=lr, warmup=100, seed=seed, log_every=0 if quick else 500))
    return model, state["raised"]


def sparse_parity_table(model, n_test: int, seed: int, k_train: int = K_TRAIN) -> pd.DataFrame:
    """Accuracy of ``model`` on ``n_test`` fresh samples per ``k_test`` in 1..8 and 2l bin (``SP_BINS``), true ids."""
    ids = sp.SparseParityIds(sp.N_DEFAULT)
    rng = np.random.default_rng(seed + 1)
    rows = []
    for k in range(1, 9):
        for lo, hi in SP_BINS:
            acc = sp.sparse_parity_accuracy(model, rng, (lo // 2, hi // 2), k, n_test, ids)
            rows.append(dict(k_train=k_train, k_test=k, length_lo=lo, length_hi=hi, accuracy=acc))
    return pd.DataFrame(rows)


def run_job(cfg: dict, seed: int, quick: bool, k_train: int = K_TRAIN) -> tuple[pd.DataFrame, str]:
    """One training + evaluation on one torch thread; returns its rows (with ``seed``) and a line saying what the
    curriculum did and how long it took."""
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    model, raised = train_sparse_parity(cfg["sp_steps"], seed, cfg["probe_every"], quick, pe=SP_PE, k_train=k_train)
    df = sparse_parity_table(model, cfg["sp_test"], seed, k_train).assign(seed=seed)
    return df, (f"sparse parity ({SP_PE}, K_train {k_train}) seed {seed}: K curriculum raised at steps {raised}; "
                f"{time.perf_counter() - t0:.0f} s")


def merge(path: Path, new: pd.DataFrame) -> pd.DataFrame:
    """``new`` plus the rows of ``path`` whose ``(k_train, seed)`` ``new`` does not have; sorted by k_train (descending,
    the main K_train first), seed, k_test and bin."""
    if path.exists():
        new = replace_rows(pd.read_csv(path), new, ["k_train", "seed"])
    return new.sort_values(["k_train", "seed", "k_test", "length_lo"], ascending=[False, True, True, True]).reset_index(drop=True)


def summary(a: pd.DataFrame) -> pd.DataFrame:
    """``sparse_parity_summary.csv``: accuracy over seeds per ``(k_train, k_test, bin)``: ``mean, sd`` (sample, NaN
    for one seed), ``min, max, seeds``."""
    g = a.groupby(["k_train", "k_test", "length_lo", "length_hi"], sort=False).accuracy
    return g.agg(mean="mean", sd="std", min="min", max="max", seeds="count").reset_index()


def figure(a: pd.DataFrame) -> go.Figure:
    """Heatmap of the mean accuracy over seeds by (k_test, length bin), the sd over seeds in each cell's text (the
    ``K_train = 4`` rows; the ``k = 1`` side run is in the table only)."""
    a = a[a.k_train == K_TRAIN]
    g = a.groupby(["k_test", "length_hi"]).accuracy
    piv, sd = g.mean().unstack(), g.std().fillna(0).unstack()
    many = a.seed.nunique() > 1
    text = [[f"{m:.2f}<br>+-{s:.2f}" if many else f"{m:.2f}" for m, s in zip(rm, rs)] for rm, rs in zip(piv.values, sd.values)]
    fig = go.Figure(go.Heatmap(z=piv.values, x=[f"{lo}-{hi}" for lo, hi in SP_BINS], y=piv.index, zmin=0.5, zmax=1,
                               colorscale="Viridis", text=text, texttemplate="%{text}", colorbar=dict(title="accuracy")))
    fig.update_xaxes(title="test length 2l (training: 20-50)")
    fig.update_yaxes(title="k_test", dtick=1)
    fig.update_layout(height=500, width=800, title=f"sparse parity, RoPE ({SP_PE}) + PoSE, K_train = {K_TRAIN}: accuracy, "
                      f"mean (+- sd) over {a.seed.nunique()} seed(s) (003 Fig. 3)")
    return fig


def main(argv: list[str] | None = None) -> pd.DataFrame:
    ap = parser(__doc__, "a few steps and test points per cell, one seed (seconds)")
    ap.add_argument("--seeds", type=int, nargs="+", default=None, help="training seeds (default 0 1 2; quick: 0)")
    ap.add_argument("--workers", type=int, default=2, help="processes for the independent trainings (quick: 1)")
    ap.add_argument("--k-train", type=int, default=K_TRAIN, choices=range(1, 9), metavar="1..8",
                    help=f"the largest k trained on (default {K_TRAIN}, the paper's; 1: the k = 1 side run)")
    args = ap.parse_args(argv)
    cfg = QUICK if args.quick else FULL
    seeds = args.seeds if args.seeds is not None else cfg["seeds"]
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    if args.quick or args.workers <= 1:
        with one_thread():
            results = [run_job(cfg, s, args.quick, args.k_train) for s in seeds]
    else:  # independent models: one process per core beats intra-op threads on matmuls this small
        with ProcessPoolExecutor(args.workers, mp_context=get_context("spawn")) as ex:
            results = list(ex.map(run_job, [cfg] * len(seeds), seeds, [args.quick] * len(seeds), [args.k_train] * len(seeds)))
    new = pd.concat([r[0] for r in results], ignore_index=True)
    a = merge(args.out / "sparse_parity.csv", new)
    a.to_csv(args.out / "sparse_parity.csv", index=False)
    summary(a).to_csv(args.out / "sparse_parity_summary.csv", index=False)
    for _, line in results:
        print(line)
    print("sparse parity accuracy, mean over seeds (rows k_test, columns: upper end of the 2l bin):")
    print(new.pivot_table(index="k_test", columns="length_hi", values="accuracy").round(2).to_string())
    print(f"total {time.perf_counter() - t0:.0f} s")
    if (a.k_train == K_TRAIN).any():
        save_figure(figure(a), args.out, "sparse_parity")
    return new


if __name__ == "__main__":
    main()
