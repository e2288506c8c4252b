"""Length sweep: the same prompts' prefixes scanned at several lengths (paper 001's measurements against context length).

``sweep(model, prompts, lengths)`` runs ``interp.scan`` once per length on ``prompts[:, :n]``, so every
length sees the same text and lengths are comparable; each scan streams (memory grows with the length,
never with ``[head, pos, pos]``). The default config turns on ``ScanConfig.geometry`` (cluster scores, key
norms, attention received, max q.k per query; ``interp.measures.geometry``). The values at a length are those
of ``interp.scan`` on the same prefixes (same code path; tested).

Lengths beyond the model's context are refused unless ``beyond_context=True`` (positions out of the
training distribution: what paper 001 studies).
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Sequence

import pandas as pd
import torch

from interp.errors import ConfigError, PromptError
from interp.io import write_atomic, write_text_atomic
from interp.models import LoadedModel
from interp.engine.executor import ModelSpec, ray_workers, run_sharded
from interp.engine import ScanConfig, ScanResult


@dataclass
class SweepResult:
    """Scans of the same prompts at several lengths.

    Attributes:
        results: ``{length: ScanResult}`` in increasing length.
        seconds: ``{length: {"scan": s, "finalise": s, "scan_cpu": s, "finalise_cpu": s}}`` wall-clock seconds of each
            length's scan and of its head table, and the CPU seconds of this process for each (empty for a loaded sweep).
        partial: ``"K of N lengths"`` when the sweep was stopped early (``sweep(stop_on=...)``; ``results`` then holds
            the finished lengths), else None; written to ``sweep.json``. stopped: the exception that stopped it.
    """

    results: dict[int, ScanResult]
    seconds: dict[int, dict[str, float]] = field(default_factory=dict)
    partial: str | None = None
    stopped: BaseException | None = field(default=None, repr=False, compare=False)
    _heads: dict[int, pd.DataFrame] = field(default_factory=dict, repr=False, compare=False)

    def heads(self, n: int) -> pd.DataFrame:
        """The head table of length ``n`` (``ScanResult.heads``), computed once and kept."""
        if n not in self._heads:
            self._heads[n] = self.results[n].heads
        return self._heads[n]

    @property
    def lengths(self) -> list[int]:
        """The scanned lengths, increasing."""
        return sorted(self.results)

    @property
    def table(self) -> pd.DataFrame:
        """Tidy table: one row per (length, layer, head), ``length`` then every column of ``ScanResult.heads``."""
        return pd.concat([self.heads(n).assign(length=n)[["length", *self.heads(n).columns]] for n in self.lengths],
                         ignore_index=True)

    def save(self, directory: str | Path) -> Path:
        """Write ``sweep.csv``, ``sweep.json`` (lengths) and ``length_<n>/`` (each scan's ``state.pt`` + ``scan.json``).

        The tables are written atomically (``interp.io``); ``sweep.json``, which marks a complete sweep, last.
        """
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        for n, r in self.results.items():
            r.save(d / f"length_{n}")
        table = self.table
        write_atomic(d / "sweep.csv", lambda tmp: table.to_csv(tmp, index=False))
        write_text_atomic(d / "sweep.json", json.dumps({"lengths": self.lengths, **({"partial": self.partial} if self.partial else {})}))
        return d

    @classmethod
    def load(cls, directory: str | Path) -> "SweepResult":
        """Read a sweep written by ``save``.

        Raises:
            FileNotFoundError: ``directory`` has no ``sweep.json``. CorruptStateError: see ``ScanResult.load``.
        """
        d = Path(directory)
        if not (d / "sweep.json").exists():
            raise FileNotFoundError(f"{d} is not a sweep output (no sweep.json); write one with interp sweep --out")
        j = json.loads((d / "sweep.json").read_text())
        return cls({int(n): ScanResult.load(d / f"length_{n}") for n in j["lengths"]}, partial=j.get("partial"))


def check_lengths(lengths: Sequence[int], available: int, context: int, beyond_context: bool) -> list[int]:
    """Sorted unique lengths, each in ``2..available`` and (unless ``beyond_context``) ``<= context``.

    Raises:
        ConfigError: no length, or a length below 2 or above the prompts' length.
        PromptError: a length beyond the model's context without ``beyond_context``.
    """
    out = sorted(set(int(n) for n in lengths))
    if not out or out[0] < 2:
        raise ConfigError(f"lengths must be integers >= 2, e.g. 512,1024,2048; got {list(lengths)}")
    if out[-1] > available:
        raise ConfigError(f"length {out[-1]} exceeds the prompts' {available} tokens; make the prompts at least that long")
    if out[-1] > context and not beyond_context:
        raise PromptError(f"length {out[-1]} exceeds the model's context ({context}); pass --beyond-context "
                          f"(beyond_context=True) to measure out-of-distribution positions on purpose")
    return out


def sweep(
    model: LoadedModel,
    prompts: torch.Tensor | Sequence[torch.Tensor],
    lengths: Sequence[int],
    config: ScanConfig | None = None,
    *,
    beyond_context: bool = False,
    progress: bool = False,
    meta: dict | None = None,
    executor: str = "local",
    workers: int = 2,
    address: str | None = None,
    spec: ModelSpec | None = None,
    scan_fn: Callable[[int, list[torch.Tensor], dict], ScanResult] | None = None,
    stop_on: tuple[type[BaseException], ...] = (),
) -> SweepResult:
    """Scan the prefixes ``prompts[:, :n]`` for every ``n`` in ``lengths``.

    Args:
        model: a loaded model.
        prompts: ``[prompt, pos]`` token ids (or a list of ``[pos]`` tensors, all at least ``max(lengths)`` long).
        lengths: prefix lengths to scan.
        config: scan settings; default ``ScanConfig(geometry=True, counterfactual_queries=0)`` (the exact pre-RoPE sink
            weight: the sweep is paper 001's length study).
        beyond_context: allow lengths beyond the model's context.
        progress: one tqdm bar per length (prompts scanned), preceded by a line naming the length and followed by
            one with the length's scan and finalisation (head table) wall times, on stderr.
        meta: extra ``meta`` entries of every scan.
        executor, workers, address, spec: run each length's scan on Ray workers (``interp.engine.executor``; the same
            workers serve every length; ``spec`` says how they load the model, default ``ModelSpec(model.card.name)``).
        scan_fn: ``scan_fn(n, prefixes, meta) -> ScanResult`` scans one length instead of ``run_sharded`` (``interp
            sweep`` passes one that keeps each prompt's state as a unit of the run, ``interp.cli.longrun``).
        stop_on: exception types (e.g. ``interp.cli.longrun.Interrupted``) that end the sweep early: the length in
            flight is dropped, the result holds the finished lengths with ``partial = "K of N lengths"`` and
            ``stopped`` the exception (no length finished: ``results`` empty).

    Returns:
        SweepResult (``.table``: one row per length, layer and head; each length's head table already computed,
        ``.seconds`` its wall times).

    Raises:
        ConfigError / PromptError: see ``check_lengths``; PromptError / ShapeError from ``interp.scan``.
    """
    toks = [torch.as_tensor(p, dtype=torch.long) for p in prompts]
    ns = check_lengths(lengths, min(t.numel() for t in toks), model.card.context_length, beyond_context)
    cfg = config or ScanConfig(geometry=True, counterfactual_queries=0)
    spec = spec or ModelSpec(model.card.name, str(model.device), model.card.dtype)
    actors = ray_workers(spec, workers, address) if executor == "ray" else None
    out = SweepResult({})
    n = None
    try:
        for k, n in enumerate(ns):
            if progress:
                print(f"length {n} ({k + 1} of {len(ns)}): {len(toks)} prompt{'s' * (len(toks) != 1)}", file=sys.stderr, flush=True)
            t0, c0 = time.perf_counter(), time.process_time()
            m = {**(meta or {}), "length": n}
            if scan_fn is not None:
                res = scan_fn(n, [t[:n] for t in toks], m)
            else:
                res = run_sharded(spec, [t[:n] for t in toks], replace(cfg), executor=executor, model=model, actors=actors,
                                  progress=progress, meta=m, beyond_context=beyond_context)
            t1, c1 = time.perf_counter(), time.process_time()
            out.results[n] = res
            out.heads(n)  # finalise now (the head table), so the length's cost is seen where it is spent
            out.seconds[n] = {"scan": t1 - t0, "finalise": time.perf_counter() - t1,
                              "scan_cpu": c1 - c0, "finalise_cpu": time.process_time() - c1}
            if progress:
                print(f"length {n}: scanned in {out.seconds[n]['scan']:.1f} s, finalised in {out.seconds[n]['finalise']:.1f} s",
                      file=sys.stderr, flush=True)
    except stop_on as err:
        out.results.pop(n, None)  # stopped while its head table was computed: dropped like a length in flight
        out.seconds.pop(n, None)
        out._heads.pop(n, None)
        out.stopped, out.partial = err, f"{len(out.results)} of {len(ns)} lengths"
    return out
