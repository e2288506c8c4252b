"""All-heads effects and activation patching on Ray workers: heads split by layer, results merged equal to one process.

``head_effects`` (``interp effects``) and ``patch_heads`` (``interp patch``) give each head's number from runs that
depend only on that head's layer (each layer's runs start from the clean residual stream, and the effects fast path
starts every layer afresh), so the heads can be split by layer into chunks that run anywhere and merge exactly. Each
worker is an actor of ``interp.engine.executor.ray_workers`` that loads the model once; a chunk is
``head_effects`` / ``patch_heads`` on the chunk's heads with no bootstrap, and the driver puts every chunk's
per-prompt (per-pair) values in the order of one local run and computes the table and its bootstrap from them, so
the merged table equals a local run's to the float32 rounding of the workers' thread count (a worker runs one torch
thread: matmuls block differently; about 1e-6 relative).

Faults: a worker process that dies (a killed actor, a lost node) is restarted with the model reloaded and its chunk
retried, up to ``retries`` times (``max_restarts`` / ``max_task_retries`` of the actor); past that, one line names the
failure. A Ray run keeps no units on disk, so a driver that dies loses the run (``--resume`` covers local runs only).

Chunks: layers are dealt round-robin to ``chunks`` chunks (default twice the workers) so that every chunk mixes early
layers (a forward from layer 0) with late ones (a forward from near the top).
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Callable, Sequence

import numpy as np
import torch

from interp.engine.executor import RETRIES, ModelSpec, ray_get, ray_workers
from interp.errors import ConfigError
from interp.experiments.effects import EffectsConfig, EffectsResult, _order, _prompts, _table, head_effects
from interp.experiments.patch_tasks import Pair
from interp.experiments.patching import PatchConfig, PatchResult, _rows, head_table, patch_heads


def layer_chunks(heads: Sequence[tuple[int, int]], chunks: int) -> list[list[tuple[int, int]]]:
    """``heads`` split by layer into at most ``chunks`` non-empty chunks, layers dealt round-robin in increasing order.

    Raises:
        ConfigError: ``chunks`` < 1.
    """
    if chunks < 1:
        raise ConfigError(f"chunks must be >= 1, got {chunks}")
    layers = sorted({l for l, _ in heads})
    out = [[(l, h) for l, h in sorted(heads) if layers.index(l) % chunks == c] for c in range(chunks)]
    return [c for c in out if c]


def _grid(model) -> tuple[int, int]:
    return model.card.n_layers, model.card.n_heads


def _effects_chunk(model, prompts, config: EffectsConfig, means) -> EffectsResult:
    return head_effects(model, prompts, config, means=means)


def _patch_chunk(model, pairs, config: PatchConfig) -> PatchResult:
    return patch_heads(model, pairs, config)


def _gather(actors: list, fn: Callable, jobs: list[tuple]) -> list:
    """Run ``fn(model, *job)`` for every job on the actors (job ``i`` on actor ``i mod n``), in job order."""
    return ray_get([actors[i % len(actors)].run.remote(fn, *job) for i, job in enumerate(jobs)])


def _start(spec: ModelSpec, workers: int, address: str | None, actors: list | None, retries: int) -> tuple[list, tuple[int, int]]:
    """The actors (started unless given) and the model's ``(n_layers, n_heads)`` as a worker loaded it."""
    if workers < 1:
        raise ConfigError(f"--workers must be >= 1, got {workers}")
    started = actors or ray_workers(spec, workers, address, retries)
    import ray

    return started, tuple(ray.get(started[0].run.remote(_grid)))


def _meta(chunk_meta: dict, cfg, t0: float, actors: list, n_chunks: int) -> dict:
    """A chunk's ``meta`` made the merged run's: the whole run's heads and bootstrap, wall time, the workers."""
    import ray

    meta = {**chunk_meta, "seconds": time.perf_counter() - t0, "executor": "ray", "workers": len(actors), "chunks": n_chunks,
            "worker_pids": sorted(set(ray.get([a.pid.remote() for a in actors])))}
    meta["config"] = {**chunk_meta["config"], "heads": "all" if cfg.heads is None else [f"{l}:{h}" for l, h in cfg.heads],
                      "bootstrap": cfg.bootstrap}
    return meta


def effects_on_workers(spec: ModelSpec, prompts, config: EffectsConfig | None = None, *, workers: int = 2,
                       address: str | None = None, actors: list | None = None, chunks: int | None = None,
                       retries: int = RETRIES, means: torch.Tensor | None = None) -> EffectsResult:
    """``head_effects`` of every chosen head on Ray workers (module docstring): the same table, per-prompt values and
    clean NLL as one local run.

    Args:
        spec: how each worker loads the model (``ModelSpec``).
        prompts: ``[prompt, pos]`` token ids (equal lengths) or a list of ``[pos]`` tensors.
        config: ``EffectsConfig`` (heads None: every head of the model).
        workers: actors to start (ignored with ``actors``); address: an existing Ray cluster; actors: reuse actors of
            ``interp.engine.executor.ray_workers``; chunks: head chunks (default ``2 x workers``); retries: restarts
            of a dead worker and retries of its chunk; means: ``[layer, head, d_head]`` for ``mean`` (default: the
            prompts' own, as ``head_effects``).

    Returns:
        ``EffectsResult`` with ``meta["executor"] = "ray"``, ``workers``, ``chunks``, ``worker_pids``.

    Raises:
        ConfigError: bad settings (``EffectsConfig.check``), Ray missing, ``workers`` / ``chunks`` < 1.
        InterpError: a chunk failed after its retries.
    """
    cfg = config or EffectsConfig()
    toks = _prompts(prompts)
    t0 = time.perf_counter()
    actors, (L, H) = _start(spec, workers, address, actors, retries)
    cfg.check(L, H, toks.shape[1])
    heads = sorted(cfg.heads) if cfg.heads is not None else [(l, h) for l in range(L) for h in range(H)]
    parts = layer_chunks(heads, chunks or 2 * len(actors))
    results = _gather(actors, _effects_chunk, [(toks, replace(cfg, heads=tuple(p), bootstrap=0), means) for p in parts])
    order = _order(heads, cfg.interventions)
    index = {r: i for i, r in enumerate(order)}
    dn, kl = np.zeros((len(order), toks.shape[0])), np.zeros((len(order), toks.shape[0]))
    for res in results:
        rows = [index[(int(l), int(h), n)] for l, h, n in zip(res.table["layer"], res.table["head"], res.table["intervention"])]
        dn[rows], kl[rows] = res.per_prompt["dnll"], res.per_prompt["kl"]
    first = results[0]
    meta = _meta(first.meta, cfg, t0, actors, len(parts))
    return EffectsResult(_table(order, dn, kl, cfg), {"dnll": dn, "kl": kl}, first.clean_nll, first.clean_nll_prompt, meta)


def patch_on_workers(spec: ModelSpec, pairs: Sequence[Pair], config: PatchConfig | None = None, *, workers: int = 2,
                     address: str | None = None, actors: list | None = None, chunks: int | None = None,
                     retries: int = RETRIES) -> PatchResult:
    """``patch_heads`` (activation patching per head, or per head and position) on Ray workers (module docstring):
    the same table and per-pair values as one local run.

    Args:
        spec: how each worker loads the model; pairs: the clean / corrupted ``Pair``s (``interp.experiments.patch_tasks``);
        config: ``PatchConfig`` (heads None: every head); workers, address, actors, chunks, retries: as
            ``effects_on_workers``.

    Returns:
        ``PatchResult`` with ``meta["executor"] = "ray"``, ``workers``, ``chunks``, ``worker_pids``.

    Raises:
        ConfigError: bad settings (``patch_heads``' checks run on the first chunk), Ray missing, ``workers`` < 1.
        InterpError: a chunk failed after its retries.
    """
    cfg = config or PatchConfig()
    t0 = time.perf_counter()
    actors, (L, H) = _start(spec, workers, address, actors, retries)
    heads = sorted(cfg.heads) if cfg.heads is not None else [(l, h) for l in range(L) for h in range(H)]
    parts = layer_chunks(heads, chunks or 2 * len(actors))
    results = _gather(actors, _patch_chunk, [(list(pairs), replace(cfg, heads=tuple(p), bootstrap=0)) for p in parts])
    order = _rows(cfg, heads, len(pairs[0].clean))
    index = {r: i for i, r in enumerate(order)}
    per_pair = np.zeros((len(order), len(pairs)))
    key_cols = ["layer", "head", "pos"] if cfg.positions == "each" else ["layer", "head"]
    for res in results:
        rows = [index[tuple(int(v) for v in r)] for r in res.table[key_cols].itertuples(index=False)]
        per_pair[rows] = res.per_pair
    first = results[0]
    meta = _meta(first.meta, cfg, t0, actors, len(parts))
    return PatchResult(head_table(order, per_pair, first.clean, first.corrupt, cfg), per_pair, first.clean, first.corrupt, meta)
