"""Training dynamics as an axis: the per-head table of ``interp.scan`` at many training steps (issue 35).

A **trajectory** is one table with one row per ``(step, layer, head)``: the columns of ``ScanResult.heads`` (every
enabled measure: slash scores per lag, sink weight, r1 / stable rank, entropy, the token-matched scores of
TransformerLens' head detector ...) on the same fixed probe prompts at each step, plus ``step``, ``revision`` (the
checkpoint's name, or empty during training), ``scan_seconds`` (the wall time of that checkpoint's scan: the cost
of one checkpoint is one scan of the probes, not a re-run of training) and whatever scalar columns the caller adds
per step (training loss, in-context-learning score).

Two ways to build one:

- **During training**: :class:`ScanCallback` is a callback of ``interp.lab.train.train_model`` (``callbacks=``): at
  the steps of its schedule (:func:`every_schedule`, :func:`log_schedule`) it wraps the model being trained as a
  ``LoadedModel`` and scans the probes (``torch.inference_mode``; the model is put back in training mode after).
- **From saved checkpoints**: :func:`find_checkpoints` resolves a folder of checkpoints (subfolders with a
  ``config.json``) or Hugging Face revisions of a hub id (from the local cache only: nothing is downloaded) and
  checks them all (a folder with no model, a revision that does not exist, mixed architectures) before anything is
  scanned; :func:`checkpoint_trajectory` scans each in turn (``interp trajectory``); a folder's ``train_log.csv``
  (:func:`training_log`; ``python -m interp.lab.checkpoints`` trains a lab model and writes one beside its
  checkpoints) gives the training loss at every step (:func:`add_train_loss`).

The in-context-learning score (:func:`icl_score`; Olsson et al. 2022, "In-context Learning and Induction Heads",
Sec. 2): the mean loss at a late token minus the mean loss at an early token of the same sequences (they use the
500th and the 50th token); negative when later context helps.

Imports the engine's public API and ``interp.models``; never the lab (the caller hands a ``wrap`` function that
turns its model into a ``LoadedModel``).
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np
import pandas as pd
import torch
from jaxtyping import Int

from interp.engine import ScanConfig, scan
from interp.errors import ConfigError, InterpError
from interp.models import LoadedModel

__all__ = ["TrajectoryError", "every_schedule", "log_schedule", "scan_rows", "ScanCallback", "icl_score", "Checkpoint",
           "find_checkpoints", "checkpoint_trajectory", "TRAIN_LOG", "training_log", "add_train_loss", "final_roles",
           "first_crossing", "seed_summary", "ARCH_KEYS"]

# config.json entries that must agree between checkpoints of one trajectory (HF names; lab models alias them)
ARCH_KEYS = ("model_type", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "hidden_size", "vocab_size",
             "n_layers", "n_heads", "d_model", "pe")


class TrajectoryError(InterpError, ValueError):
    """Checkpoints that cannot form one trajectory (none found, a missing revision, mixed architectures)."""


def every_schedule(steps: int, k: int) -> list[int]:
    """Steps ``0, k, 2k, ..., steps`` (``steps`` always included): scan every ``k`` optimiser steps.

    Raises:
        ConfigError: ``steps < 0`` or ``k < 1``.
    """
    if steps < 0 or k < 1:
        raise ConfigError(f"every_schedule needs steps >= 0 and k >= 1, got steps={steps}, k={k}")
    return sorted(set(range(0, steps + 1, k)) | {steps})


def log_schedule(steps: int, points: int = 20) -> list[int]:
    """Step 0 and about ``points`` steps spaced evenly in ``log(step)`` from 1 to ``steps`` (rounded, duplicates
    dropped, ``steps`` included): dense early, where heads form fastest, sparse late.

    Raises:
        ConfigError: ``steps < 1`` or ``points < 1``.
    """
    if steps < 1 or points < 1:
        raise ConfigError(f"log_schedule needs steps >= 1 and points >= 1, got steps={steps}, points={points}")
    grid = np.unique(np.round(np.geomspace(1, steps, points)).astype(int))
    return sorted({0, steps, *(int(s) for s in grid)})


def scan_rows(model: LoadedModel, probes: torch.Tensor | Sequence[torch.Tensor], config: ScanConfig | None = None, *,
              step: int | None = None, revision: str = "", extra: dict | None = None, engine: str = "auto") -> pd.DataFrame:
    """One checkpoint's rows of a trajectory: ``scan(model, probes, config).heads`` with ``step``, ``revision``,
    ``scan_seconds`` (wall time of the scan) and the scalar entries of ``extra`` as columns (in front).

    Args:
        probes: ``[prompt, pos]`` token ids, or a list of ``[pos]`` tensors (the same at every step).
        step: the optimiser step (None: unknown, e.g. a checkpoint named without a number).

    Raises:
        PromptError: bad probe prompts (as ``interp.engine.scan``).
        ConfigError: an engine the device cannot run (as ``interp.engine.scan``).
    """
    t0 = time.perf_counter()
    res = scan(model, probes, config or ScanConfig(), engine=engine)
    heads = res.heads.copy()
    front = {"step": step if step is not None else np.nan, "revision": revision, **(extra or {}),
             "scan_seconds": time.perf_counter() - t0}
    for i, (k, v) in enumerate(front.items()):
        heads.insert(i, k, v)
    return heads


class ScanCallback:
    """A ``train_model`` callback that scans the model at the steps of a schedule and keeps the trajectory.

    Called as ``callback(step, model, loss)``: ``step`` 0 before the first update (``loss`` None), then after each
    optimiser step ``s = 1..steps`` with that step's training loss (nats per target token). At a scheduled step it
    runs :func:`scan_rows` on ``wrap(model)`` (``torch.inference_mode``, the model in eval mode, then back in its
    previous mode) and appends the rows; every call's loss goes to :attr:`losses`.

    Args:
        wrap: turns the training model into a ``LoadedModel`` (for a lab model:
            ``lambda m: interp.lab.lab_loaded(m, vocab)``).
        probes: ``[prompt, pos]`` token ids scanned at every scheduled step.
        config: the scan's settings (default ``ScanConfig(token_match=True, shape=True)``: the always-on measures,
            the token-matched scores and entropy).
        steps: the scheduled steps (:func:`every_schedule`, :func:`log_schedule`).
        extras: ``model -> {name: float}`` computed at each scheduled step after the scan (e.g. an ICL score);
            the entries become columns.
        engine: the scan engine (``interp.engine.scan``).

    Attributes:
        frame: the trajectory, one row per ``(step, layer, head)`` (empty DataFrame before the first scan).
        losses: ``[step, loss]`` of every call after step 0.
        seconds: total wall time of the scans and extras (the cost the callback adds to training).
    """

    def __init__(self, wrap: Callable[[torch.nn.Module], LoadedModel], probes: torch.Tensor, config: ScanConfig | None = None,
                 *, steps: Iterable[int], extras: Callable[[torch.nn.Module], dict] | None = None, engine: str = "auto"):
        self.wrap, self.probes, self.engine, self.extras = wrap, probes, engine, extras
        self.config = config or ScanConfig(token_match=True, shape=True)
        self.steps = set(int(s) for s in steps)
        self._frames: list[pd.DataFrame] = []
        self._losses: list[tuple[int, float]] = []
        self.seconds = 0.0

    def __call__(self, step: int, model: torch.nn.Module, loss: float | None = None) -> None:
        """Record ``loss``; at a scheduled ``step`` scan ``wrap(model)`` and append its rows (class docstring).

        Raises:
            as ``interp.engine.scan`` (the probes do not fit the model).
        """
        if loss is not None:
            self._losses.append((int(step), float(loss)))
        if step not in self.steps:
            return
        t0 = time.perf_counter()
        was_training = model.training
        try:
            rows = scan_rows(self.wrap(model), self.probes, self.config, step=step, engine=self.engine,
                             extra={"train_loss": float(loss) if loss is not None else np.nan})
            if self.extras is not None:
                with torch.no_grad():
                    for k, v in self.extras(model).items():
                        rows.insert(rows.columns.get_loc("scan_seconds"), k, float(v))
        finally:
            model.train(was_training)
        self._frames.append(rows)
        self.seconds += time.perf_counter() - t0

    @property
    def frame(self) -> pd.DataFrame:
        """The trajectory so far: one row per ``(step, layer, head)`` (class docstring)."""
        return pd.concat(self._frames, ignore_index=True) if self._frames else pd.DataFrame()

    @property
    def losses(self) -> pd.DataFrame:
        """``[step, loss]`` of every call after step 0 (the training loss of each optimiser step, nats)."""
        return pd.DataFrame(self._losses, columns=["step", "loss"])


@torch.no_grad()
def icl_score(model: torch.nn.Module, input_ids: Int[torch.Tensor, "batch pos"], early: int, late: int,
              batch_size: int = 16, width: int = 1) -> float:
    """In-context-learning score (Olsson et al. 2022, Sec. 2): mean next-token loss (nats) at token index ``late``
    minus at token index ``early`` over the rows of ``input_ids``; token ``t`` is predicted from the logits at
    ``t - 1``. Negative: the model predicts later tokens better, having more context.

    With ``width > 1`` each side is the mean over a band of ``width`` tokens, ``early .. early + width - 1`` and
    ``late - width + 1 .. late`` (ours: one token of a few hundred windows has a standard error of a few tenths of
    a nat, larger than the effect; Olsson et al. average one token over a large dataset instead).

    Args:
        model: returns ``.logits`` ``[batch, pos, vocab]`` from ``model(input_ids=...)``.
        input_ids: ``[batch, pos]`` sequences (text windows).
        early, late: token indices, ``1 <= early < late < pos`` (Olsson et al.: the 50th and 500th token).
        width: tokens per band, ``early + width - 1 < late - width + 1`` (the bands do not overlap).

    Raises:
        ConfigError: indices outside ``1 <= early < late < pos`` or overlapping bands.
    """
    n = input_ids.shape[1]
    if not 1 <= early < late < n:
        raise ConfigError(f"icl_score needs 1 <= early < late < pos = {n}, got early={early}, late={late}")
    if width < 1 or early + width - 1 >= late - width + 1:
        raise ConfigError(f"icl_score: bands of {width} tokens from {early} and up to {late} overlap; "
                          f"use width < {(late - early + 1) // 2 + 1}")
    bands = (torch.arange(early, early + width), torch.arange(late - width + 1, late + 1))
    tot = torch.zeros(2, dtype=torch.float64)
    dev = next(model.parameters(), torch.empty(0)).device  # the forward on the model's device, the sums on the CPU
    for s in range(0, len(input_ids), batch_size):
        x = input_ids[s: s + batch_size].to(dev)
        logp = torch.log_softmax(model(input_ids=x[:, :late]).logits.double(), -1)
        for i, t in enumerate(bands):
            tot[i] += -logp[:, t - 1].gather(-1, x[:, t, None])[..., 0].sum().cpu() / width
    nll = tot / len(input_ids)
    return float(nll[1] - nll[0])


@dataclass(frozen=True)
class Checkpoint:
    """One model of a trajectory: ``label`` (folder or revision name), ``step`` (the number in the label, or None)
    and ``path`` (a local Hugging Face model folder)."""

    label: str
    step: int | None
    path: Path


def _step_of(label: str) -> int | None:
    nums = re.findall(r"\d+", label)
    return int(nums[-1]) if nums else None


def _arch(path: Path) -> dict:
    try:
        cfg = json.loads((path / "config.json").read_text())
    except (OSError, ValueError) as err:
        raise TrajectoryError(f"{path / 'config.json'} cannot be read ({err}); every checkpoint needs a Hugging Face config.json") from None
    return {k: cfg[k] for k in ARCH_KEYS if k in cfg}


def _hub_snapshot(repo: str, revision: str) -> Path:
    """The local cache folder of ``repo`` at ``revision`` (``huggingface_hub``, ``local_files_only``: never downloads)."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        return Path(snapshot_download(repo, revision=revision, local_files_only=True))
    except (LocalEntryNotFoundError, FileNotFoundError, ValueError, OSError):
        raise TrajectoryError(f"revision {revision!r} of {repo} is not in the local Hugging Face cache; download it first "
                              f"(huggingface-cli download {repo} --revision {revision}) or pass a folder of checkpoints") from None


def find_checkpoints(source: str | Path, revisions: Sequence[str] | None = None) -> list[Checkpoint]:
    """The checkpoints of a trajectory, all checked before any is loaded or scanned.

    Args:
        source: a folder whose subfolders hold saved models (each with a ``config.json``; e.g. ``step-100``,
            ``checkpoint-2000``), a single model folder (a one-point trajectory), or a Hugging Face hub id
            ``ORG/NAME`` whose revisions are read from the local cache only.
        revisions: the subfolders (or hub revisions) to use, in order; default every model subfolder, sorted by
            the last number in its name (then by name).

    Returns:
        ``[Checkpoint]`` in trajectory order.

    Raises:
        TrajectoryError: a folder without any model, a revision that does not exist (not a subfolder with a
            ``config.json``, or not in the Hugging Face cache), a hub id without ``revisions``, or checkpoints whose
            ``config.json`` differ in architecture (``ARCH_KEYS``); the message names the offending ones.
    """
    src = Path(str(source)).expanduser()
    if src.is_dir():
        subs = {p.name: p for p in src.iterdir() if p.is_dir() and (p / "config.json").is_file()}
        if revisions:
            missing = [r for r in revisions if r not in subs and not (r in (".", "") and (src / "config.json").is_file())]
            if missing:
                have = ", ".join(sorted(subs)[:8]) or "none"
                raise TrajectoryError(f"revision(s) {', '.join(missing)} not found in {src} (model subfolders: {have})")
            cks = [Checkpoint(r, _step_of(r), subs.get(r, src)) for r in revisions]
        elif subs:
            order = sorted(subs, key=lambda n: (_step_of(n) is None, _step_of(n) or 0, n))
            cks = [Checkpoint(n, _step_of(n), subs[n]) for n in order]
        elif (src / "config.json").is_file():
            cks = [Checkpoint(src.name, _step_of(src.name), src)]
        else:
            raise TrajectoryError(f"{src} holds no model: no config.json in it or in any subfolder (save checkpoints with "
                                  f"interp.lab.save_lab or save_pretrained, one folder each)")
    elif "/" in str(source) and not str(source).startswith(("/", ".", "~")):
        if not revisions:
            raise TrajectoryError(f"{source} is a hub id: name its revisions with --revisions (e.g. step1000,step2000)")
        cks = [Checkpoint(r, _step_of(r), _hub_snapshot(str(source), r)) for r in revisions]
    else:
        raise TrajectoryError(f"{source} is neither a folder nor a hub id ORG/NAME; pass a folder of saved checkpoints")
    archs = [(_arch(c.path), c.label) for c in cks]
    first, label0 = archs[0]
    for a, label in archs[1:]:
        if a != first:
            diff = ", ".join(f"{k}={first.get(k)} vs {a.get(k)}" for k in sorted(set(first) | set(a)) if first.get(k) != a.get(k))
            raise TrajectoryError(f"mixed architectures: {label0} and {label} differ ({diff}); a trajectory needs one model's checkpoints")
    return cks


def checkpoint_trajectory(checkpoints: Sequence[Checkpoint], probes: torch.Tensor | Callable[[LoadedModel], torch.Tensor],
                          config: ScanConfig | None = None, *, progress: bool = True, engine: str = "auto",
                          device: str | None = None, store: str | Path | None = None,
                          stop_on: tuple[type[BaseException], ...] = ()) -> pd.DataFrame:
    """Scan each checkpoint on the same probes: the trajectory (module docstring), rows in checkpoint order.

    Args:
        checkpoints: from :func:`find_checkpoints`.
        probes: ``[prompt, pos]`` token ids, or a function of the first loaded model returning them (built once,
            e.g. ``lambda m: interp.corpus.prompts(m, "repeated-random", 8, 256)``), so every checkpoint sees the
            same tokens.
        progress: a tqdm bar over checkpoints.
        store: a folder keeping each finished checkpoint's rows (``checkpoint-KKKKK.pkl``, K its index in
            ``checkpoints``, written atomically and read back) from which finished ones are read back instead of loaded
            and scanned (``interp trajectory --resume``; pickled, so the rows read back are the rows written;
            ``interp.experiments.units.keep_units``).
        stop_on: exception types (e.g. ``interp.cli.longrun.Interrupted``) that end the run early: the checkpoint in
            flight is dropped (one stopped after its unit's rename counts), the frame holds the finished checkpoints'
            rows, ``attrs["partial"]`` is ``"K of N checkpoints"`` and ``attrs["stopped"]`` the exception.

    Raises:
        InterpError: a damaged checkpoint (as ``interp.models.load_model``) or bad probes (as ``interp.engine.scan``).
    """
    from tqdm.auto import tqdm

    from interp.experiments.units import keep_units, read_pickle, write_pickle
    from interp.models import load_model

    cks = list(checkpoints)
    names = [f"checkpoint-{k:05d}.pkl" for k in range(len(cks))]
    by_name = dict(zip(names, cks))
    ids = {"probes": probes if isinstance(probes, torch.Tensor) else None}

    def compute(todo: list[str]):
        for name in todo:
            ck = by_name[name]
            model = load_model(f"local:{ck.path}", device=device)
            if ids["probes"] is None:
                ids["probes"] = probes(model)
            rows = scan_rows(model, ids["probes"], config, step=ck.step, revision=ck.label, engine=engine)
            del model
            yield name, rows

    bar = tqdm(total=len(cks), desc="trajectory", unit="checkpoint", disable=not progress)
    try:
        got, stopped = keep_units(Path(store) if store is not None else None, names, compute, read_pickle, write_pickle,
                                  bar, stop_on=stop_on)
    finally:
        bar.close()
    frames = list(got.values())
    out = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    if stopped is not None:
        out.attrs.update(partial=f"{len(frames)} of {len(cks)} checkpoints", stopped=stopped)
    return out


TRAIN_LOG = "train_log.csv"  # a run folder's training log: columns step, loss (python -m interp.lab.checkpoints writes it)


def training_log(source: str | Path) -> pd.DataFrame | None:
    """The training log of a folder of checkpoints: ``source/train_log.csv`` as ``[step, loss]`` (the training loss of
    each optimiser step, nats per token), sorted by step; None when ``source`` is not a folder or has no log.

    Raises:
        TrajectoryError: a log that cannot be read, or lacks the ``step`` or ``loss`` column.
    """
    path = Path(str(source)).expanduser() / TRAIN_LOG
    if not path.is_file():
        return None
    try:
        log = pd.read_csv(path)
    except (OSError, ValueError) as err:
        raise TrajectoryError(f"{path} cannot be read ({err}); a training log is a CSV with columns step, loss") from None
    if not {"step", "loss"} <= set(log.columns):
        raise TrajectoryError(f"{path} has columns {', '.join(map(str, log.columns))}; a training log needs step and loss")
    return log[["step", "loss"]].sort_values("step", ignore_index=True)


def add_train_loss(traj: pd.DataFrame, log: pd.DataFrame) -> pd.DataFrame:
    """``traj`` with a ``train_loss`` column after ``revision`` (as :class:`ScanCallback` writes it): the logged loss at
    each row's step (NaN for step 0, before any update, and for steps the log lacks)."""
    out = traj.drop(columns=["train_loss"], errors="ignore")
    loss = log.drop_duplicates("step", keep="last").set_index("step")["loss"]
    out.insert(out.columns.get_loc("revision") + 1, "train_loss", out["step"].map(loss).astype(float))
    return out


def final_roles(traj: pd.DataFrame, kappa: float = 0.1, role_threshold: float = 0.3) -> dict[tuple[int, int], str]:
    """Each head's role at the last step of a trajectory, for colouring (``interp.report.trajectory_page``): the
    largest of ``prev_token_score``, ``induction_score`` and ``duplicate_token_score`` if it is at least
    ``role_threshold`` (``previous-token``, ``induction``, ``duplicate``), else ``sink`` if ``has_sink``, else
    ``slash-d<lag>`` if ``is_sdh`` (004 Def. 3.1, ``kappa`` 0.1), else ``other``. Columns a scan did not compute are
    skipped.
    """
    last = traj[traj["step"] == traj["step"].max()] if traj["step"].notna().any() else traj
    names = {"prev_token_score": "previous-token", "induction_score": "induction", "duplicate_token_score": "duplicate"}
    roles = {}
    for _, r in last.iterrows():
        scores = {names[c]: r[c] for c in names if c in r and pd.notna(r[c])}
        best = max(scores, key=scores.get) if scores else None
        if best is not None and scores[best] >= role_threshold:
            role = best
        elif bool(r.get("has_sink", False)):
            role = "sink"
        elif bool(r.get("is_sdh", False)) and r.get("slash_score", 0) >= kappa:
            role = f"slash-d{int(r['slash_delta'])}"
        else:
            role = "other"
        roles[(int(r["layer"]), int(r["head"]))] = role
    return roles


def first_crossing(trace: pd.DataFrame, column: str, level: float, step: str = "step") -> float:
    """A formation time: the first ``trace[step]`` (rows in step order) at which ``trace[column] >= level``; NaN if
    the column never reaches ``level``."""
    hit = trace.loc[trace[column] >= level, step]
    return float(hit.iloc[0]) if len(hit) else float("nan")


def seed_summary(runs: pd.DataFrame, by: Sequence[str], values: Sequence[str]) -> pd.DataFrame:
    """Per group of ``by`` and per column of ``values``: ``seeds`` (rows), ``n`` (finite values), ``mean``, ``min``,
    ``max`` (every seed's value lies in ``[min, max]``) and ``lo`` / ``hi``, the 95% Student-t interval of the mean
    over the finite values (NaN with fewer than two). Long format: one row per group and ``measure``."""
    from scipy import stats

    out = []
    for key, g in runs.groupby(list(by), sort=False, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        for v in values:
            x = g[v].to_numpy(dtype=float)
            f = x[np.isfinite(x)]
            m = float(f.mean()) if len(f) else np.nan
            half = float(stats.t.ppf(0.975, len(f) - 1) * f.std(ddof=1) / np.sqrt(len(f))) if len(f) > 1 else np.nan
            out.append({**dict(zip(by, key)), "measure": v, "seeds": len(x), "n": len(f), "mean": m,
                        "min": float(f.min()) if len(f) else np.nan, "max": float(f.max()) if len(f) else np.nan,
                        "lo": m - half, "hi": m + half})
    return pd.DataFrame(out)
