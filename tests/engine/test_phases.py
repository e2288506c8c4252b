"""interp.engine.phases: a scan timed by phase names every part of the collector's work, and the parts fit in the wall time."""

import time

import torch

from interp.engine import ScanConfig, scan
from interp.engine.phases import phase_timer
from tests.conftest import random_tokens


def test_scan_phases_cover_the_collector_and_fit_in_the_wall_time(tiny_llama):
    prompts = torch.stack([random_tokens(48, seed=s) for s in range(2)])
    with phase_timer() as timer:
        t0 = time.perf_counter()
        scan(tiny_llama, prompts, ScanConfig())
        wall = time.perf_counter() - t0
    seconds = timer.seconds
    for name in ("taps", "attention", "counterfactual", "measures"):
        assert seconds[name] > 0, name
        assert timer.calls[name] == 2 * tiny_llama.card.n_layers, name  # once per layer and prompt
    assert sum(seconds.values()) < wall


def test_phase_outside_a_timer_records_nothing(tiny_llama):
    with phase_timer() as timer:
        pass
    scan(tiny_llama, random_tokens(16)[None], ScanConfig())
    assert dict(timer.seconds) == {}


def test_detail_times_each_measure_and_the_taps_parts_inside_their_phase(tiny_llama):
    """``phase_timer(detail=True)``: every enabled measure's update and the taps' parts are timed as ``outer/inner``,
    once per layer and prompt, each within its outer phase; the top-level sums are those of a plain timer's names."""
    from interp.measures import REGISTRY

    cfg = ScanConfig()
    with phase_timer(detail=True) as timer:
        scan(tiny_llama, torch.stack([random_tokens(48, seed=s) for s in range(2)]), cfg)
    top, detail = timer.top, timer.detail
    names = [m.name for m in REGISTRY.enabled(cfg)]
    assert {f"measures/{m}" for m in names} | {"taps/pre", "taps/copies"} <= set(detail)
    for inner in detail:
        assert timer.calls[inner] == 2 * tiny_llama.card.n_layers, inner
    assert sum(v for k, v in detail.items() if k.startswith("measures/")) <= top["measures"]
    assert detail["taps/pre"] + detail["taps/copies"] <= top["taps"]
    assert not any("/" in k for k in top)
