"""analyses/atlas/shape_zoo.py in quick mode (tiny model): it runs, and its summary holds what it says."""

from pathlib import Path

import numpy as np
import pandas as pd

from tests.conftest import load_script

ROOT = Path(__file__).resolve().parents[1] / "analyses"


def test_quick_shape_zoo_writes_the_distribution_and_its_summary(tmp_path):
    mod = load_script(ROOT / "atlas/shape_zoo.py")
    summary = mod.main(["--quick", "--out", str(tmp_path)])
    heads = pd.read_csv(tmp_path / "shape_zoo.csv")
    assert list(summary.model) == ["tiny-llama"] and len(heads) == summary.heads[0]
    dm = heads.distant_mass.to_numpy()
    assert np.isclose(summary.distant_q50[0], np.median(dm), atol=1e-4)
    assert np.isclose(summary.share_below_05[0], (dm < 0.5).mean())
    assert 0 <= summary.otsu_threshold[0] <= 1


def test_otsu_splits_two_clusters_between_them():
    mod = load_script(ROOT / "atlas/shape_zoo.py")
    x = np.r_[np.full(50, 0.1), np.full(30, 0.7)]
    assert 0.1 < mod.otsu(x) <= 0.7
