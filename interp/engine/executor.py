"""Where a scan's shards run: in this process (``local``) or on Ray workers (``ray``), behind one function.

``run_sharded(spec, prompts, config, executor=..., workers=N)`` splits the prompts into shards (prompt i
goes to shard ``i % n_shards``, as ``interp scan --shard``), scans each shard with its global prompt
ids and merges the shards' additive sums (``interp.scan.merge_results``, exact; it refuses a prompt
counted twice). With ``executor="ray"`` each of the ``workers`` is a Ray actor that loads the model
once and scans the shards sent to it; a worker process that dies is restarted (the model reloaded)
and its shard retried (``max_restarts`` / ``max_task_retries``), so the merged result is complete and
identical. ``ray.init()`` starts a local cluster on this machine; ``address="auto"`` or
``"ray://host:10001"`` joins an existing one (README, "Scaling out"). Ray is an optional extra
(``pip install -e '.[ray]'``); the local executor needs none of it.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator, Sequence

import torch

from interp.errors import ConfigError, InterpError
from interp.engine import ScanConfig, ScanResult, merge_results, scan

EXECUTORS = ("local", "ray")
RETRIES = 3  # restarts of a dead worker, and retries of its shard


@dataclass(frozen=True)
class ModelSpec:
    """How a worker loads and runs the model: the ``interp.load_model`` arguments and the scan's attention engine."""

    name: str
    device: str = "cpu"
    dtype: str = "float32"
    engine: str = "auto"  # interp.engine.collector.ENGINES

    def load(self):
        """The loaded model (``interp.models.load_model``)."""
        from interp.models import load_model

        return load_model(self.name, device=self.device, dtype=self.dtype)


def shard_ids(n_prompts: int, n_shards: int) -> list[list[int]]:
    """Prompt indices of each shard: shard s holds ``i % n_shards == s`` (empty shards dropped)."""
    return [ids for s in range(n_shards) if (ids := list(range(s, n_prompts, n_shards)))]


def _scan_shard(model, prompts, ids, config, shard: str, meta: dict, beyond_context: bool, engine: str = "auto") -> ScanResult:
    res = scan(model, prompts, config, prompt_ids=ids, meta={**meta, "shard": shard}, beyond_context=beyond_context,
               engine=engine)
    res.meta["worker_pid"] = os.getpid()
    return res


class _Worker:
    """A Ray actor's body: the model loaded once, then any number of shards."""

    def __init__(self, spec: ModelSpec):
        torch.set_num_threads(max(1, int(os.environ.get("INTERP_WORKER_THREADS", "1"))))
        self.model, self.engine = spec.load(), spec.engine

    def pid(self) -> int:
        return os.getpid()

    def scan(self, prompts, ids, config, shard, meta, beyond_context):
        return _scan_shard(self.model, prompts, ids, config, shard, meta, beyond_context, self.engine)

    def run(self, fn, *args, **kwargs):
        """``fn(model, *args, **kwargs)`` on the loaded model (a module-level function: Ray pickles it by reference);
        how experiments other than the scan (``interp.experiments.sharded``) use the same workers."""
        return fn(self.model, *args, **kwargs)


def ray_workers(spec: ModelSpec, workers: int, address: str | None = None, retries: int = RETRIES) -> list:
    """``workers`` Ray actors holding the model (``ray.init`` first when Ray is not running yet). An actor whose
    process dies is restarted (the model reloaded) and the call it was running retried, up to ``retries`` times each.

    Raises:
        ConfigError: Ray is not installed (the message has the install command), or ``retries`` < 0.
    """
    if retries < 0:
        raise ConfigError(f"--retries must be >= 0, got {retries}")
    try:
        import ray
    except ImportError:
        raise ConfigError("--executor ray needs Ray: pip install -e '.[ray]' (or pip install ray)") from None
    if not ray.is_initialized():
        ray.init(address=address, num_cpus=None if address else max(workers, os.cpu_count() or 1), include_dashboard=False,
                 log_to_driver=False, ignore_reinit_error=True)
    actor = ray.remote(num_cpus=1, max_restarts=retries, max_task_retries=retries)(_Worker)
    return [actor.remote(spec) for _ in range(workers)]


@contextmanager
def workers_for(spec: ModelSpec, executor: str, workers: int, address: str | None = None,
                retries: int = RETRIES) -> Iterator[list | None]:
    """The Ray actors of one command (``ray_workers``) for the block, ended when it exits (their processes and model
    copies freed at once, also on a cluster the command only joined); None for ``executor="local"``. A command enters
    it before ``interp.cli.longrun.interruptible``, since ``ray.init`` sets its own SIGTERM handler.

    Raises:
        ConfigError: as ``ray_workers``.
    """
    actors = ray_workers(spec, workers, address, retries) if executor == "ray" else None
    try:
        yield actors
    finally:
        if actors:
            import ray

            for a in actors:
                try:
                    ray.kill(a)
                except Exception:  # noqa: BLE001 - an actor already gone
                    pass


def ray_get(futures: list) -> list:
    """``ray.get(futures)``, a failure past the workers' restarts and retries turned into one line.

    Raises:
        InterpError: a worker failed after its retries (the message names the Ray error and what to do).
    """
    import ray

    try:
        return ray.get(futures)
    except ray.exceptions.RayError as err:
        raise InterpError(f"a Ray worker failed after its retries ({type(err).__name__}); see the worker logs (ray logs), "
                          f"raise --retries or rerun") from None


def as_completed(calls: Sequence[tuple[object, object]], poll_s: float = 0.2) -> Iterator[tuple[object, object]]:
    """``(key, result)`` of Ray calls in the order they finish: ``calls`` holds ``(key, ObjectRef)`` pairs (e.g. a unit's
    name and ``actor.scan.remote(...)``). The driver waits in steps of ``poll_s`` seconds, so a signal handler of the
    main thread (``interp.cli.longrun.interruptible``) runs within one step; when the caller stops early (an exception
    raised in it or here), the calls still queued are cancelled (best effort: a running actor call ends on its own).
    How ``interp scan`` / ``interp effects --executor ray`` write each finished shard's unit as it comes back.

    Raises:
        InterpError: a call failed after its worker's restarts and retries (``ray_get``'s message).
    """
    import ray

    waiting = {ref: key for key, ref in calls}
    try:
        while waiting:
            ready, _ = ray.wait(list(waiting), num_returns=1, timeout=poll_s)
            for ref in ready:
                key = waiting.pop(ref)
                yield key, ray_get([ref])[0]
    finally:
        for ref in waiting:
            try:
                ray.cancel(ref)
            except Exception:  # noqa: BLE001 - an actor call that cannot be cancelled runs to its end, unread
                pass


def run_sharded(
    spec: ModelSpec,
    prompts: Sequence[torch.Tensor] | torch.Tensor,
    config: ScanConfig | None = None,
    *,
    executor: str = "local",
    workers: int = 1,
    shards: int | None = None,
    address: str | None = None,
    model=None,
    actors: list | None = None,
    meta: dict | None = None,
    beyond_context: bool = False,
    progress: bool = False,
) -> ScanResult:
    """Scan ``prompts`` on the chosen executor and return the merged result (equal to one single-process pass).

    Args:
        spec: how workers load the model.
        prompts: ``[prompt, pos]`` or a list of ``[pos]`` token ids.
        config: scan settings.
        executor: ``"local"`` (this process, one pass, ``workers`` ignored) or ``"ray"``.
        workers: Ray actors to start (each loads the model once).
        shards: shards to split into (default: ``workers``); more shards than workers balance uneven prompts.
        address: an existing Ray cluster (``"auto"``, ``"ray://host:10001"``); default a local one.
        model: an already loaded model for the local executor (else ``spec.load()``).
        actors: reuse Ray actors from ``ray_workers`` (e.g. for a sweep's lengths).
        meta, beyond_context, progress: as ``interp.scan``.

    Raises:
        ConfigError: unknown executor, ``workers`` < 1, or Ray missing.
    """
    if executor not in EXECUTORS:
        raise ConfigError(f"unknown executor {executor!r}; use one of {', '.join(EXECUTORS)}")
    if workers < 1:
        raise ConfigError(f"--workers must be >= 1, got {workers}")
    cfg = config or ScanConfig()
    toks = list(prompts)
    meta = dict(meta or {})
    if executor == "local":
        return scan(model if model is not None else spec.load(), toks, cfg, progress=progress, meta={**meta, "shard": "0/1"},
                    beyond_context=beyond_context, engine=spec.engine)
    actors = actors or ray_workers(spec, workers, address)
    parts = shard_ids(len(toks), shards or len(actors))
    futures = [actors[s % len(actors)].scan.remote([toks[i] for i in ids], ids, cfg, f"{s}/{len(parts)}", meta, beyond_context)
               for s, ids in enumerate(parts)]
    results = ray_get(futures)
    merged = merge_results(results)
    merged.meta.update({"executor": "ray", "workers": len(actors), "seconds": max(r.meta["seconds"] for r in results),
                        "worker_pids": sorted({r.meta["worker_pid"] for r in results})})
    return merged


run_scan = run_sharded  # the old name (it shadowed interp.scan's meaning); kept until the next release
