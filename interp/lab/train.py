"""Training lab models on CPU: next-token cross-entropy on marked target tokens, AdamW, warmup + cosine.

A task supplies ``batch_fn(step, rng) -> dict`` with

- ``input_ids`` ``[batch, pos]`` int64, right-padded with ``<pad>`` (id 0);
- ``loss_mask`` ``[batch, pos]`` bool: True at the *target* tokens (position t is predicted from the logits
  at t - 1), e.g. the copied string and ``<EOS>`` of a copy task;
- optionally ``position_ids`` ``[batch, pos]`` (``[batch, pos, 2]`` for 2D-RoPE) int64.

Right padding needs no attention mask: attention is causal, so pads after a sequence never change it.

Callbacks (``train_model(..., callbacks=[...])``) watch training: each is called as ``cb(step, model, loss)``, once
with step 0 before the first update (``loss`` None) and after every optimiser step ``s = 1..steps`` with that step's
loss; ``interp.experiments.trajectory.ScanCallback`` scans the model on fixed probes at the steps of a schedule
(issue 35: heads forming during training). Callbacks run under ``torch.no_grad`` and must leave the weights alone.

Imports nothing from interp but the lab's model.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import torch

from interp.lab.model import LabForCausalLM

BatchFn = Callable[[int, np.random.Generator], dict]
Callback = Callable[[int, torch.nn.Module, "float | None"], None]


@dataclass
class TrainConfig:
    """Optimiser settings of ``train_model``.

    Attributes:
        steps: optimiser steps. lr: peak learning rate. weight_decay: AdamW's decoupled decay.
        warmup: steps of linear warmup from 0 (then cosine decay to ``min_lr_frac * lr``).
        clip: gradient-norm clip. seed: seeds torch and the ``numpy`` generator handed to ``batch_fn``.
        log_every: print the mean loss every so many steps (0: silent). betas: AdamW's betas.
    """

    steps: int = 1000
    lr: float = 1e-3
    weight_decay: float = 0.0
    warmup: int = 100
    min_lr_frac: float = 0.1
    clip: float = 1.0
    seed: int = 0
    log_every: int = 0
    betas: tuple[float, float] = (0.9, 0.98)


def lm_loss(model: LabForCausalLM, batch: dict) -> torch.Tensor:
    """Mean cross-entropy (nats per target token) of ``logits[:, t-1]`` against ``input_ids[:, t]`` where ``loss_mask[:, t]``.

    Raises:
        ValueError: ``loss_mask`` of another shape than ``input_ids``, or no target token at position >= 1.
    """
    ids, mask = batch["input_ids"], batch["loss_mask"].bool()
    if mask.shape != ids.shape:
        raise ValueError(f"loss_mask {list(mask.shape)} must have the shape of input_ids {list(ids.shape)}")
    if not mask[:, 1:].any():
        raise ValueError("loss_mask marks no target token at positions >= 1")
    logits = model(input_ids=ids, position_ids=batch.get("position_ids")).logits
    tgt = mask[:, 1:]
    return torch.nn.functional.cross_entropy(logits[:, :-1][tgt].float(), ids[:, 1:][tgt])


def _lr_factor(step: int, cfg: TrainConfig) -> float:
    if step < cfg.warmup:
        return (step + 1) / cfg.warmup
    t = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    return cfg.min_lr_frac + (1 - cfg.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * min(1.0, t)))


def train_model(model: torch.nn.Module, batch_fn: BatchFn, cfg: TrainConfig | None = None,
                loss_fn: Callable[[torch.nn.Module, dict], torch.Tensor] = lm_loss,
                callbacks: Sequence[Callback] = ()) -> list[float]:
    """Train ``model`` in place on ``cfg.steps`` batches from ``batch_fn``; returns the per-step losses.

    Seeded: ``torch.manual_seed(cfg.seed)`` and ``batch_fn`` gets ``numpy.random.default_rng(cfg.seed)``, so
    the same model, task and config give the same weights (on the same machine and thread count).
    The model is left in eval mode. Training runs on the model's device (``model.to("cuda")`` first for a GPU): the
    batches' tensors are moved there.

    Args:
        loss_fn: ``(model, batch) -> scalar`` to minimise; default ``lm_loss`` (the masked next-token loss).
            A task with more outputs (``interp.lab.ppc``: position ids too) passes its own.
        callbacks: ``cb(step, model, loss)`` at step 0 (loss None) and after every step (module docstring); their
            time is not in the ``log_every`` lines' seconds.

    Raises:
        ValueError: ``cfg.steps < 1`` or ``cfg.warmup < 0``; see ``lm_loss``.
    """
    cfg = cfg or TrainConfig()
    if cfg.steps < 1 or cfg.warmup < 0:
        raise ValueError(f"train_model: need steps >= 1 and warmup >= 0, got {cfg.steps}, {cfg.warmup}")
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, betas=cfg.betas)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: _lr_factor(s, cfg))
    model.train()
    losses: list[float] = []
    _notify(callbacks, 0, model, None)
    t0 = time.perf_counter()
    dev = next(model.parameters()).device
    for step in range(cfg.steps):
        batch = {k: v.to(dev) if torch.is_tensor(v) else v for k, v in batch_fn(step, rng).items()}
        loss = loss_fn(model, batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip)
        opt.step()
        sched.step()
        losses.append(loss.item())
        _notify(callbacks, step + 1, model, losses[-1])
        if cfg.log_every and (step + 1) % cfg.log_every == 0:
            recent = np.mean(losses[-cfg.log_every:])
            print(f"  step {step + 1}/{cfg.steps}  loss {recent:.4f}  ({time.perf_counter() - t0:.0f} s)", flush=True)
    model.eval()
    return losses


def _notify(callbacks: Sequence[Callback], step: int, model: torch.nn.Module, loss: float | None) -> None:
    if callbacks:
        with torch.no_grad():
            for cb in callbacks:
                cb(step, model, loss)


def pad_batch(seqs: list[list[int]], targets: list[list[bool]], pad: int = 0) -> dict:
    """Right-pad token lists and their target flags into ``input_ids`` ``[batch, pos]`` and ``loss_mask`` ``[batch, pos]``.

    Raises:
        ValueError: a sequence and its flags differ in length.
    """
    n = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), n), pad, dtype=torch.long)
    mask = torch.zeros((len(seqs), n), dtype=torch.bool)
    for i, (s, t) in enumerate(zip(seqs, targets)):
        if len(s) != len(t):
            raise ValueError(f"sequence {i}: {len(s)} tokens but {len(t)} target flags")
        ids[i, : len(s)] = torch.tensor(s, dtype=torch.long)
        mask[i, : len(t)] = torch.tensor(t, dtype=torch.bool)
    return {"input_ids": ids, "loss_mask": mask}
