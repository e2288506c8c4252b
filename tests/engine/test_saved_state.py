"""A ``state/`` folder written by interp 0.1.0 (before the Measure protocol) loads, gives the same head table, and
re-renders; a state that lacks a measure's sums gives NaN columns for it with a warning, not a refusal."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

import interp
from interp.engine import ScanResult

OLD = Path(__file__).resolve().parents[1] / "fixtures" / "state_v0_1_0_tiny_llama"


def test_state_written_before_the_protocol_loads_and_rerenders(tmp_path):
    r = ScanResult.load(OLD)
    assert r.missing_measures == ["sink_rate"]  # added after 0.1.0: its column is NaN, the rest as written then
    old = pd.read_csv(OLD / "heads.csv")
    with pytest.warns(UserWarning, match="sink_rate"):
        new = r.heads
    assert new["sink_prompt_frac"].isna().all() and set(new.columns) == set(old.columns) | {"sink_prompt_frac"}
    for c in old.columns:  # spectra come from LAPACK, whose kernels differ in the last bits between CPUs
        np.testing.assert_allclose(new[c].to_numpy(dtype=float), old[c].to_numpy(dtype=float), rtol=1e-12, atol=0, err_msg=c)
    out = interp.write_report(r, tmp_path / "report.html")  # the head table is cached: no second warning
    assert Path(out).stat().st_size > 100_000


def test_a_missing_measure_gives_nan_columns(tmp_path):
    d = tmp_path / "scan"
    shutil.copytree(OLD, d)
    state = torch.load(d / "state.pt")
    for k in ("cone_pre", "cone_rot"):  # as if the cone measure had been added after this scan
        del state[k]
    torch.save(state, d / "state.pt")
    r = ScanResult.load(d)
    assert r.missing_measures == ["sink_rate", "cone"]
    with pytest.warns(UserWarning, match="'sink_rate', 'cone'"):
        h = r.heads
    assert h["cos_qq_pre"].isna().all() and h["slash_score"].notna().all()
