"""What the ``analyses/effects`` scripts share: the models a run covers, a model's atlas table (the committed one, or a
small atlas of a tiny model in quick mode), its effects table, bootstrap intervals of a mean, and writing a table that
keeps the rows of models not run."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # analyses/_common.py
from _common import FIGURES, installed, replace_rows  # noqa: E402

QUICK_MODEL = "tiny-llama"


def models(args) -> list[str]:
    """The models of a run: ``tiny-llama`` in quick mode, else the installed ones of ``--models``. Sets one torch
    thread (the machine is shared; the timings are not the point of these scripts)."""
    torch.set_num_threads(1)
    return [QUICK_MODEL] if args.quick else installed(args.models)


def load(name: str):
    """``interp.load_model(name)`` on the CPU (zoo models come from their installed packages, nothing from a hub)."""
    import interp

    return interp.load_model(name, device="cpu")


def atlas_of(model, quick: bool) -> pd.DataFrame:
    """The model's atlas table: ``figures/atlas_<model>.csv`` (``analyses/head_atlas.py``), or in quick mode a small
    atlas run here (2 x 96 tokens, no InP: long enough for the streaming window of 64 keys; one plane per band
    ablated)."""
    if not quick:
        return pd.read_csv(FIGURES / f"atlas_{model.card.name}.csv")
    from interp.experiments.atlas import AtlasConfig, run_atlas

    return run_atlas(model, AtlasConfig(prompts=2, tokens=96, inp=False, ablate=True, n_remove=1)).table


def mean_interval(values, n: int = 1000, seed: int = 0) -> tuple[float, float, float]:
    """``(mean, lo, hi)``: the mean of ``values`` (one per prompt, trial or head) and its 95% percentile bootstrap
    interval (``interp.experiments.effects.bootstrap_interval``)."""
    from interp.experiments.effects import bootstrap_interval

    v = np.asarray(values, dtype=float)[None]
    lo, hi = bootstrap_interval(v, n, seed)
    return float(v.mean()), float(lo[0]), float(hi[0])


def write(df: pd.DataFrame, path: Path, keys: tuple[str, ...] = ("model",)) -> pd.DataFrame:
    """Write ``df`` to ``path``, replacing the rows of its ``keys`` values and keeping the others (a run of one model
    leaves the other models' rows); returns what was written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        df = replace_rows(pd.read_csv(path), df, list(keys))
    df.to_csv(path, index=False)
    return df
