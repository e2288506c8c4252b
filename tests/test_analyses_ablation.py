"""The band-ablation analysis script (004 Table 5 / Fig. 8) in quick mode on the real default model."""

from pathlib import Path

import numpy as np
import pytest

from interp.models import is_installed
from tests.conftest import load_script

pytestmark = pytest.mark.slow
SCRIPT = Path(__file__).resolve().parents[1] / "analyses" / "p004_slash/band_ablation.py"


@pytest.mark.skipif(not is_installed("smollm2-135m"), reason="smollm2-135m not installed")
def test_quick_band_ablation_writes_table5_and_fig8(tmp_path):
    out = load_script(SCRIPT).main(["--quick", "--causal", "--out", str(tmp_path)])
    t5 = out["table5"]
    assert set(t5.columns) >= {"model", "delta", "head_name", "original", "wo_high", "wo_medium", "wo_low"}
    assert (t5.groupby("delta").size() <= 3).all()  # top three per lag, as in the paper's table
    table = out["table"]
    np.testing.assert_allclose(table["ratio_wo_high"], table["wo_high"] / table["original"])
    s = out["summary"]
    assert set(s["band"]) == {"wo_high", "wo_medium", "wo_low"} and (s["sdh"] == len(table)).all()
    assert (tmp_path / "band_ablation_table5.csv").exists() and (tmp_path / "band_ablation_fig8.html").exists()
    c = out["causal"]
    assert list(c["band"]) == ["wo_high", "wo_medium", "wo_low"] and np.isfinite(c["delta_nll"]).all()


@pytest.mark.skipif(not is_installed("smollm2-135m"), reason="smollm2-135m not installed")
def test_quick_inp_pulse_scores_every_sdh(tmp_path):
    t = load_script(SCRIPT.with_name("p004_slash/inp_pulse.py")).main(["--quick", "--out", str(tmp_path)])["table"]
    assert len(t) > 0 and (t["n_active_abs"] == t["active_high"] + t["active_medium"] + t["active_low"]).all()
    scored = t[t["lag"] >= 1]
    assert (scored["hit_abs"] == (scored["peak_abs"] == scored["lag"])).all() and t.loc[t["lag"] == 0, "hit_abs"].isna().all()
    assert (tmp_path / "pulse_check.csv").exists() and (tmp_path / "inp_fig7.html").exists()
