"""ScanConfig is built from the registry's options; optional measures are switched on by name."""

import dataclasses

import pytest

from interp.engine import ScanConfig
from interp.engine.config import measure_rows, switch_on
from interp.errors import ConfigError
from interp.measures import REGISTRY


def test_switch_on_turns_on_only_the_named_optional_measures():
    cfg = switch_on(ScanConfig(kappa=0.2), ["inp"])
    assert cfg.inp and not cfg.geometry and cfg.kappa == 0.2
    assert [m.name for m in REGISTRY.enabled(cfg)] == [m.name for m in REGISTRY if m.name not in ("geometry", "variants", "token_match", "echo", "massive", "shape", "kv_budget",
                                                                                   "heavy_hitters")]
    with pytest.raises(ConfigError, match="unknown measure 'nope'; optional measures: inp, geometry, token_match, echo, massive, shape, kv_budget, heavy_hitters"):
        switch_on(ScanConfig(), ["nope"])
    with pytest.raises(ConfigError, match="always on"):
        switch_on(ScanConfig(), ["slash"])


def test_config_round_trips_through_json_and_checks_values():
    from interp.rope import band_ablations

    cfg = ScanConfig(variants=band_ablations(8), long_lags=[10, 20])
    assert cfg.long_lags == (10, 20)
    back = ScanConfig.from_dict(cfg.to_dict())
    assert back == cfg and dataclasses.replace(back) == cfg
    with pytest.raises(ConfigError, match="long_min_frac"):
        ScanConfig(long_min_frac=1.5)
    with pytest.raises(ConfigError, match="unknown scan settings"):
        ScanConfig.from_dict({**cfg.to_dict(), "from_a_plugin": 1})


def test_measure_list_names_every_measure():
    rows = measure_rows()
    assert [r["measure"] for r in rows] == [m.name for m in REGISTRY]
    assert {r["on"] for r in rows if r["measure"] in ("inp", "geometry")} == {"--measure inp", "--measure geometry"}
