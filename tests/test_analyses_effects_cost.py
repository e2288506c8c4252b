"""analyses/benchmarks/effects_cost.py in quick mode (tiny-llama, every head): one row per run, the ratios are the
timings' quotients, and the fast path agrees with the naive loop that ran beside it."""

from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import load_script

ROOT = Path(__file__).resolve().parents[1] / "analyses"


def test_quick_effects_cost(tmp_path):
    df = load_script(ROOT / "benchmarks" / "effects_cost.py").main(["--quick", "--out", str(tmp_path)]).set_index("run")
    assert list(df.index) == ["scan", "forward", "effects", "naive"]
    assert (tmp_path / "effects_cost.csv").exists()
    back = pd.read_csv(tmp_path / "effects_cost.csv").set_index("run")
    assert back.loc["scan", "ratio"] == 1.0
    # every head x zero, mean, streaming x 2 prompts on tiny-llama (2 layers x 4 heads)
    assert df.loc["effects", "runs"] == df.loc["naive", "runs"] == 8 * 3 * 2 and not df.loc["naive", "extrapolated"]
    assert df.loc["effects", "speedup"] == pytest.approx(df.loc["naive", "seconds"] / df.loc["effects", "seconds"], rel=1e-3)
    assert df.loc["effects", "ratio"] == pytest.approx(df.loc["effects", "seconds"] / df.loc["scan", "seconds"], rel=1e-3)
    assert df.loc["effects", "speedup_cpu"] == pytest.approx(df.loc["naive", "cpu_s"] / df.loc["effects", "cpu_s"], rel=1e-3)
    assert (df["cpu_s"] > 0).all() and df.loc["scan", "ratio_cpu"] == 1.0
    assert df.loc["effects", "max_abs_diff"] < 1e-4
    t = pd.read_csv(tmp_path / "effects_tiny-llama.csv")
    assert len(t) == 8 * 3 and set(t["intervention"]) == {"zero", "mean", "streaming"}


def test_naive_sample_spreads_over_the_layers_and_extrapolates(tmp_path):
    mod = load_script(ROOT / "benchmarks" / "effects_cost.py")
    # flat indices round(linspace(0, 269, 5)) = 0, 67, 134, 202, 269 on the 30 x 9 grid
    assert mod.spread_heads(30, 9, 5) == ((0, 0), (7, 4), (14, 8), (22, 4), (29, 8))
    df = mod.main(["--quick", "--naive-heads", "3", "--interventions", "zero", "--out", str(tmp_path)]).set_index("run")
    assert bool(df.loc["naive", "extrapolated"]) and df.loc["naive", "measured_runs"] == 3 * 2
    assert df.loc["naive", "seconds"] == pytest.approx(df.loc["naive", "measured_s"] * 8 / 3, rel=1e-9)


def test_attribution_rows_and_agreement(tmp_path):
    mod = load_script(ROOT / "benchmarks" / "effects_cost.py")
    df = mod.main(["--quick", "--attribution", "--out", str(tmp_path)]).set_index("run")
    assert df.loc["attribution", "interventions"] == "zero,mean" and df.loc["attribution", "runs"] == 2
    agree = pd.read_csv(tmp_path / "attribution_agreement.csv")
    assert set(agree["intervention"]) == {"zero", "mean"} and set(agree["depth"]) >= {"all", "early", "late"}
    assert (agree.loc[agree["depth"] == "all", "heads"] == 8).all()
    assert agree["spearman"].dropna().between(-1, 1).all()
    assert df.loc["attribution", "ratio"] == pytest.approx(df.loc["attribution", "seconds"] / df.loc["scan", "seconds"], rel=1e-9)
    # --only-attribution replaces that row alone, its ratio against the scan of its own run
    before = pd.read_csv(tmp_path / "effects_cost.csv")
    row = mod.main(["--quick", "--only-attribution", "--out", str(tmp_path)]).iloc[0]
    after = pd.read_csv(tmp_path / "effects_cost.csv")
    assert len(after) == len(before) and row["ratio"] == pytest.approx(row["seconds"] / row["scan_ref_s"], rel=1e-9)
    others = ["scan", "forward", "effects", "naive"]
    pd.testing.assert_frame_equal(after[after["run"].isin(others)].reset_index(drop=True),
                                  before[before["run"].isin(others)].reset_index(drop=True))
    assert after.loc[after["run"] == "attribution", "seconds"].item() == pytest.approx(row["seconds"])
