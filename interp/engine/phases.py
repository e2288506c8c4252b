"""Where a scan's time goes: named phases timed on the device that runs them, for the speed benchmarks.

``with phase_timer() as t: scan(...)`` turns timing on for the scans inside; the collector brackets its work with
``phase(name)``: ``taps`` (the finite check, the pre-RoPE q / k recovered from the post-RoPE ones and the float32
copies of q / k / v the measures read),
``attention`` (the layer's output and row log-sum-exps), ``stats`` (the tile reductions),
``counterfactual`` (the pre-RoPE key-0 weight), ``variants`` (counterfactual RoPE passes), ``measures`` (every
measure's per-layer update), ``flush`` (device sums to the CPU state). ``t.seconds`` then maps each phase to its
total seconds; the model's own layers (projections, MLPs, norms) are the scan's wall time minus their sum.

On a GPU each phase is a pair of CUDA events on the current stream, read once at the end (no host sync per layer),
so a phase's time is the GPU time of the work it launched; on a CPU it is wall time (``time.perf_counter``). A
phase opened inside another counts to the outer one only, so the phases never overlap. ``phase_timer(detail=True)``
also times the inner ones under ``outer/inner`` (``measures/spectrum``: each measure's update; ``taps/pre``,
``taps/copies``), kept apart from the top-level sums (``PhaseTimer.top`` / ``PhaseTimer.detail``).
When no timer is active ``phase`` is a shared no-op context (a global lookup per call), so scans outside a
benchmark pay nothing measurable.

Low-level module: imports only torch and the standard library.
"""

from __future__ import annotations

import contextlib
import time
from collections import defaultdict

import torch

_ACTIVE: list["PhaseTimer"] = []
_NULL = contextlib.nullcontext()


class PhaseTimer:
    """Sums of seconds per phase name (see the module docstring); ``seconds`` resolves pending CUDA events.

    Args:
        detail: also time phases opened inside another, as ``outer/inner`` (one level deep)."""

    def __init__(self, detail: bool = False):
        self._cpu: dict[str, float] = defaultdict(float)
        self._events: list[tuple[str, torch.cuda.Event, torch.cuda.Event]] = []
        self.calls: dict[str, int] = defaultdict(int)
        self.detail_on = detail
        self._open: list[str] = []

    @contextlib.contextmanager
    def time(self, name: str, cuda: bool):
        if self._open:  # a phase inside another (a counterfactual pass's attention) counts to the outer one only
            if not self.detail_on or len(self._open) > 1:
                yield
                return
            name = f"{self._open[0]}/{name}"
        self.calls[name] += 1
        self._open.append(name)
        try:
            with self._timed(name, cuda):
                yield
        finally:
            self._open.pop()

    @contextlib.contextmanager
    def _timed(self, name: str, cuda: bool):
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            yield
            end.record()
            self._events.append((name, start, end))
        else:
            t0 = time.perf_counter()
            yield
            self._cpu[name] += time.perf_counter() - t0

    @property
    def seconds(self) -> dict[str, float]:
        """``{phase: seconds}`` summed over every call (synchronises the GPU once when CUDA phases were timed)."""
        out = dict(self._cpu)
        if self._events:
            torch.cuda.synchronize()
            for name, start, end in self._events:
                out[name] = out.get(name, 0.0) + start.elapsed_time(end) / 1e3
        return out

    @property
    def top(self) -> dict[str, float]:
        """``{phase: seconds}`` of the top-level phases only (they never overlap)."""
        return {k: v for k, v in self.seconds.items() if "/" not in k}

    @property
    def detail(self) -> dict[str, float]:
        """``{"outer/inner": seconds}`` of the inner phases (``detail=True``; each within its outer phase's time)."""
        return {k: v for k, v in self.seconds.items() if "/" in k}


@contextlib.contextmanager
def phase_timer(detail: bool = False):
    """Time the phases of every scan run inside the block; yields the ``PhaseTimer`` (``detail``: inner phases too)."""
    timer = PhaseTimer(detail)
    _ACTIVE.append(timer)
    try:
        yield timer
    finally:
        _ACTIVE.remove(timer)


def phase(name: str, device: torch.device | str | None = None):
    """A context that adds its duration to phase ``name`` of the active timer (a no-op without one).

    ``device``: where the work runs (CUDA: timed with events; else wall time)."""
    if not _ACTIVE:
        return _NULL
    cuda = device is not None and torch.device(device).type == "cuda"
    return _ACTIVE[-1].time(name, cuda)
