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
failure. The driver dying is covered by ``effects_on_workers(store=...)``: the driver writes each finished layer as a
unit (``interp.experiments.effects.LayerStore``, the files a local ``head_effects`` run writes) as its chunk comes
back, and a later run reads them back and sends only the other layers out (``interp effects --resume``, on Ray or
locally). ``patch_on_workers(store=...)`` does the same per layer and token length (a chunk is one layer's heads
on the pairs of one length; the unit files of ``patch_heads(store=...)``, so ``interp patch --resume`` continues a
Ray run on Ray or locally, and a local one on Ray).

Chunks (effects): layers are dealt round-robin to ``chunks`` chunks (default twice the workers) so that every chunk
mixes early layers (a forward from layer 0) with late ones (a forward from near the top).
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Sequence

import numpy as np
import torch

from interp.engine.executor import RETRIES, ModelSpec, as_completed, ray_get, ray_workers
from interp.errors import ConfigError
from interp.experiments.effects import (EffectsConfig, EffectsResult, LayerStore, _meta as _effects_meta, _order, _prompts,
                                        _table, clean_pass, head_effects)
from interp.experiments.patch_tasks import Pair
from interp.experiments.patching import (PatchConfig, PatchResult, _meta as _patch_meta, _rows, head_table, patch_heads,
                                         read_unit, unit_path)
from interp.experiments.units import keep_units


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


def _clean_chunk(model, prompts, config: EffectsConfig) -> tuple[dict, np.ndarray]:
    """``(meta, clean NLL per prompt)`` of ``head_effects`` without its heads: what a run whose every layer was read
    back from its units still needs from a worker (the clean pass on the worker's threads, as its chunks had)."""
    t0 = time.perf_counter()
    nll = clean_pass(model, prompts, config.score_from).nll
    t = time.perf_counter() - t0
    return _effects_meta(model, config, prompts, "exact", t, nll, {"clean_pass": t}), nll


def _patch_chunk(model, pairs, config: PatchConfig) -> PatchResult:
    return patch_heads(model, pairs, config)


def _identity(model) -> tuple[str, str]:
    """``(model name, device)`` as a worker loaded it (for ``meta`` when every chunk was read back)."""
    return model.card.name, str(model.device)


def _start(spec: ModelSpec, workers: int, address: str | None, actors: list | None, retries: int) -> tuple[list, tuple[int, int]]:
    """The actors (started unless given) and the model's ``(n_layers, n_heads)`` as a worker loaded it."""
    if workers < 1:
        raise ConfigError(f"--workers must be >= 1, got {workers}")
    started = actors or ray_workers(spec, workers, address, retries)
    import ray

    return started, tuple(ray.get(started[0].run.remote(_grid)))


def _meta(chunk_meta: dict, cfg, t0: float, actors: list, n_chunks: int, pids: bool = True) -> dict:
    """A chunk's ``meta`` made the merged run's: the whole run's heads and bootstrap, wall time, the workers (their
    pids unless ``pids`` is False: a stopped run does not wait behind the chunks still running on them)."""
    import ray

    meta = {**chunk_meta, "seconds": time.perf_counter() - t0, "executor": "ray", "workers": len(actors), "chunks": n_chunks,
            "worker_pids": sorted(set(ray.get([a.pid.remote() for a in actors]))) if pids else []}
    meta["config"] = {**chunk_meta["config"], "heads": "all" if cfg.heads is None else [f"{l}:{h}" for l, h in cfg.heads],
                      "bootstrap": cfg.bootstrap}
    return meta


def effects_on_workers(spec: ModelSpec, prompts, config: EffectsConfig | None = None, *, workers: int = 2,
                       address: str | None = None, actors: list | None = None, chunks: int | None = None,
                       retries: int = RETRIES, means: torch.Tensor | None = None, store: LayerStore | None = None,
                       stop_on: tuple[type[BaseException], ...] = ()) -> EffectsResult:
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
        store: finished layers read back instead of sent out, and each layer written as its chunk comes back
            (``LayerStore``; the same files as ``head_effects(store=...)``, so either path resumes the other's run).
        stop_on: exception types (``interp.cli.longrun.Interrupted``) that end the wait early: the result holds the
            layers finished so far (with a store: those on disk), ``meta["partial"] = "K of N layers"`` and
            ``stopped``; raised again when no chunk came back yet in this run (no clean NLL to report).

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
    order = _order(heads, cfg.interventions)
    index = {r: i for i, r in enumerate(order)}
    P = toks.shape[0]
    dn, kl = np.zeros((len(order), P)), np.zeros((len(order), P))
    layer_rows = {l: [i for i, r in enumerate(order) if r[0] == l] for l in sorted({l for l, _ in heads})}  # as head_effects'
    filled = {l for l, rows in layer_rows.items() if store is not None and _read(store, l, rows, dn, kl)}
    parts = layer_chunks([x for x in heads if x[0] not in filled], chunks or 2 * len(actors)) if len(filled) < len(layer_rows) else []
    jobs = [(toks, replace(cfg, heads=tuple(p), bootstrap=0), means) for p in parts]
    first, stopped = None, None
    try:
        for k, res in as_completed([(k, actors[k % len(actors)].run.remote(_effects_chunk, *job)) for k, job in enumerate(jobs)]):
            rows = [index[(int(l), int(h), n)] for l, h, n in zip(res.table["layer"], res.table["head"], res.table["intervention"])]
            dn[rows], kl[rows] = res.per_prompt["dnll"], res.per_prompt["kl"]
            first = res if first is None else first
            for l in sorted({l for l, _ in parts[k]}):
                filled.add(l)
                if store is not None:
                    store.save(l, dn[layer_rows[l]], kl[layer_rows[l]])
    except stop_on as err:
        stopped = err
    if first is None and stopped is not None:
        raise stopped
    if first is not None:
        chunk_meta, clean_nll = first.meta, first.clean_nll_prompt
    else:  # every layer read back: the clean pass alone
        chunk_meta, clean_nll = ray_get([actors[0].run.remote(_clean_chunk, toks, cfg)])[0]
    meta = _meta(chunk_meta, cfg, t0, actors, len(parts), pids=stopped is None)
    if stopped is not None:  # a layer counts once its unit is on disk (its write may have been the step cut off)
        done = {l for l in filled if store is None or store.path(l).exists()}
        keep = [r for r, (l, _, _) in enumerate(order) if l in done]
        order, dn, kl = [order[r] for r in keep], dn[keep], kl[keep]
        meta.update(partial=f"{len(done)} of {len(layer_rows)} layers", stopped_by=str(stopped))
    return EffectsResult(_table(order, dn, kl, cfg), {"dnll": dn, "kl": kl}, float(np.mean(clean_nll)), clean_nll, meta, stopped)


def _read(store: LayerStore, layer: int, rows: list[int], dn: np.ndarray, kl: np.ndarray) -> bool:
    """Fill ``dn`` / ``kl``'s ``rows`` from ``layer``'s unit in ``store``; False when the layer is not finished."""
    got = store.load(layer, (len(rows), dn.shape[1]))
    if got is not None:
        dn[rows], kl[rows] = got
    return got is not None


def patch_on_workers(spec: ModelSpec, pairs: Sequence[Pair], config: PatchConfig | None = None, *, workers: int = 2,
                     address: str | None = None, actors: list | None = None, retries: int = RETRIES,
                     store: str | Path | None = None, stop_on: tuple[type[BaseException], ...] = ()) -> PatchResult:
    """``patch_heads`` (activation patching per head, or per head and position) on Ray workers (module docstring):
    the same table, per-pair values and unpatched metrics as one local run.

    A chunk is one layer's heads on the pairs of one token length (``patch_heads`` there, no bootstrap); chunks are
    dealt round-robin to the actors and merged as they come back.

    Args:
        spec: how each worker loads the model; pairs: the clean / corrupted ``Pair``s (``interp.experiments.patch_tasks``);
        config: ``PatchConfig`` (heads None: every head); workers, address, actors, retries: as ``effects_on_workers``.
        store: a folder of units (``interp.experiments.patching.unit_path``: ``layer-LLL-len-NNNNN.npz``, the files
            of ``patch_heads(store=...)``): units already there are read back instead of sent out, and each chunk is
            written as it comes back and read back (so a fresh run merges exactly what a resumed one reads).
        stop_on: exception types (``interp.cli.longrun.Interrupted``) that end the wait early: the result holds the
            rows of the layers finished for every token length (with a store: on disk), ``meta["partial"] = "K of N
            layers"`` and ``stopped`` (no such layer: ``table`` empty); raised again when no chunk was finished at all.

    Returns:
        ``PatchResult`` with ``meta["executor"] = "ray"``, ``workers``, ``chunks`` (sent out in this run),
        ``worker_pids``.

    Raises:
        ConfigError: no pairs, bad settings (``PatchConfig.check``; ``patch_heads``' other checks run on the chunks),
            Ray missing, ``workers`` < 1.
        InterpError: a chunk failed after its retries.
    """
    from interp.io import write_arrays_atomic

    cfg, pairs = config or PatchConfig(), list(pairs)
    if not pairs:
        raise ConfigError("no pairs given: patching needs at least one clean / corrupt pair")
    t0 = time.perf_counter()
    actors, (L, H) = _start(spec, workers, address, actors, retries)
    cfg.check(L, H)
    name, device = ray_get([actors[0].run.remote(_identity)])[0]
    heads = sorted(cfg.heads) if cfg.heads is not None else [(l, h) for l in range(L) for h in range(H)]
    by_layer: dict[int, list[tuple[int, int]]] = {}
    for l, h in heads:
        by_layer.setdefault(l, []).append((l, h))
    buckets: dict[int, list[int]] = {}  # token length -> pair indices, in patch_heads' order
    for i, p in enumerate(pairs):
        buckets.setdefault(len(p.clean), []).append(i)
    n0 = len(pairs[0].clean)
    order = _rows(cfg, heads, n0)
    index = {r: i for i, r in enumerate(order)}
    rows = {l: [index[r] for r in _rows(cfg, hs, n0)] for l, hs in by_layer.items()}  # a layer's rows, as patch_heads'
    units = {unit_path(".", l, N).name: (l, N) for N in buckets for l in sorted(by_layer)}
    names = list(units)
    sent = {"chunks": 0, "rows_per_forward": 0}  # chunks sent out in this run, the largest batch one of them ran

    def load(path: Path) -> dict:
        l, N = units[path.name]
        return read_unit(path, len(rows[l]), len(buckets[N]))

    def compute(todo: list[str]):
        jobs = [(k, actors[k % len(actors)].run.remote(_patch_chunk, [pairs[i] for i in buckets[units[n][1]]],
                                                       replace(cfg, heads=tuple(by_layer[units[n][0]]), bootstrap=0)))
                for k, n in enumerate(todo)]
        sent["chunks"] = len(jobs)
        for k, res in as_completed(jobs):
            sent["rows_per_forward"] = max(sent["rows_per_forward"], res.meta["rows_per_forward"])
            yield todo[k], {"per_pair": res.per_pair, "clean": res.clean, "corrupt": res.corrupt}

    got, stopped = keep_units(Path(store) if store is not None else None, names, compute, load,
                              lambda path, u: write_arrays_atomic(path, **u), stop_on=stop_on)
    if stopped is not None and not got:
        raise stopped
    per_pair, clean, corrupt = np.zeros((len(order), len(pairs))), np.zeros(len(pairs)), np.zeros(len(pairs))
    count: dict[int, int] = {}
    for n, u in got.items():
        l, N = units[n]
        per_pair[np.ix_(rows[l], buckets[N])] = u["per_pair"]
        count[l] = count.get(l, 0) + 1
    for N, pidx in buckets.items():  # a length's unpatched metric from its lowest finished layer (as patch_heads reads back)
        first = next((got[n] for n in names if n in got and units[n][1] == N), None)
        if first is not None:
            clean[pidx], corrupt[pidx] = first["clean"], first["corrupt"]
    worker = SimpleNamespace(card=SimpleNamespace(name=name), device=device)  # what _patch_meta reads of the model
    base = _patch_meta(worker, cfg, pairs, "exact", clean, corrupt, 0.0, {"rows_per_forward": sent["rows_per_forward"]})
    meta = _meta(base, cfg, t0, actors, sent["chunks"], pids=stopped is None)
    if stopped is not None:  # the rows of the layers finished for every token length
        done = sorted(l for l, k in count.items() if k == len(buckets))
        meta.update(partial=f"{len(done)} of {len(by_layer)} layers", stopped_by=str(stopped))
        keep = sorted(r for l in done for r in rows[l])
        order, per_pair = [order[r] for r in keep], per_pair[keep]
    return PatchResult(head_table(order, per_pair, clean, corrupt, cfg), per_pair, clean, corrupt, meta, stopped)
