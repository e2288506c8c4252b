"""analyses/benchmarks/sweep_cost.py in quick mode: one row per length, and the batched cluster scores agree with
scikit-learn's per-head silhouette / Davies-Bouldin on the same positions (an independent computation)."""

from pathlib import Path

import numpy as np

from tests.conftest import load_script

ROOT = Path(__file__).resolve().parents[1] / "analyses"


def test_quick_sweep_cost_rows_and_cluster_scores_equal_scikit_learn(tmp_path):
    df = load_script(ROOT / "benchmarks" / "sweep_cost.py").main(["--quick", "--check", "--out", str(tmp_path)])
    assert list(df["length"]) == [32, 64] and (tmp_path / "sweep_cost.csv").exists()
    assert (df["max_abs_diff_sklearn"] < 1e-6).all()
    assert np.isfinite(df[["ratio", "ratio_wall", "finalise_s"]].to_numpy()).all() and (df["sweep_scan_s"] > 0).all()
