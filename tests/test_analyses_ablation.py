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
    mod = load_script(SCRIPT.with_name("inp_pulse.py"))
    out = mod.main(["--quick", "--out", str(tmp_path)])
    t = out["table"]
    assert len(t) > 0 and (t["n_active_abs"] == t["active_high"] + t["active_medium"] + t["active_low"]).all()
    # the bootstrap's point estimate is the per-head table's median (same SDHs, same active planes, same formula)
    a41 = out["a41"].set_index("rule")
    for rule in ("abs", "signed"):
        assert a41.loc[rule, "spike_median"] == pytest.approx(t[f"a41_spike_{rule}"].median(), abs=1e-9)
        assert a41.loc[rule, "dev_median"] == pytest.approx(t[f"a41_dev_{rule}"].median(), abs=1e-9)
        assert a41.loc[rule, "spike_lo"] <= a41.loc[rule, "spike_hi"] and a41.loc[rule, "dev_lo"] <= a41.loc[rule, "dev_hi"]
    assert (tmp_path / "pulse_a41.csv").exists()
    scored = t[t["lag"] >= 1]
    assert (scored["hit_abs"] == (scored["peak_abs"] == scored["lag"])).all() and t.loc[t["lag"] == 0, "hit_abs"].isna().all()
    assert (tmp_path / "pulse_check.csv").exists() and (tmp_path / "inp_fig7.html").exists()


def test_a41_statistics_equal_offset0_pulse_head_by_head():
    """The batched Assumption 4.1 statistics are :func:`offset0_pulse` of each head (its layer's frequencies)."""
    import torch

    mod = load_script(SCRIPT.with_name("inp_pulse.py"))
    g = torch.Generator().manual_seed(0)
    inv = torch.rand(3, 16, generator=g) ** 2
    layers = torch.tensor([0, 2, 1, 2])
    active = torch.rand(4, 16, generator=g) > 0.6
    active[3] = False
    spike, dev = mod.a41_statistics(inv, layers, active, 200)
    for s in range(3):
        want = mod.offset0_pulse(inv[layers[s]], active[s], 200)
        assert (float(spike[s]), float(dev[s])) == pytest.approx(want, abs=1e-9)
    assert torch.isnan(spike[3]) and torch.isnan(dev[3])
