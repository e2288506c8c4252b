"""analyses/atlas/head_atlas.py and analyses/benchmarks/atlas_cost.py in quick mode (tiny model): they run and their tables hold
what they say (role counts equal the atlas table's flags; ratios are the timings' quotients)."""

from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import load_script

ROOT = Path(__file__).resolve().parents[1] / "analyses"


def test_quick_head_atlas(tmp_path):
    mod = load_script(ROOT / "atlas/head_atlas.py")
    summary = mod.main(["--quick", "--out", str(tmp_path)])
    t = pd.read_csv(tmp_path / "atlas_tiny-llama.csv")
    assert list(summary.model) == ["tiny-llama"] and summary.heads[0] == len(t) == 8
    for role in ("sdh", "sink", "induction", "streaming"):
        assert summary[role][0] == int(t[f"role_{role}"].sum())
    roles = pd.read_csv(tmp_path / "atlas_roles.csv")
    assert list(roles.columns[:5]) == ["model", "role", "heads", "share", "dominant"] and roles["dominant"].sum() <= 8
    mod.main(["--quick", "--out", str(tmp_path)])  # a second run replaces its model's rows, keeps nothing twice
    assert len(pd.read_csv(tmp_path / "atlas_summary.csv")) == 1


def test_quick_atlas_cost(tmp_path):
    mod = load_script(ROOT / "benchmarks" / "atlas_cost.py")
    df = mod.main(["--quick", "--out", str(tmp_path)]).set_index("run")
    assert df.loc["plain", "ratio"] == 1.0
    # the whole atlas is its two passes; each cpu_s is rounded to 4 decimals, so the sum may differ by 1.5e-4
    assert df.loc["atlas", "cpu_s"] == pytest.approx(df.loc["atlas_text", "cpu_s"] + df.loc["atlas_rr", "cpu_s"], rel=1e-3, abs=1.5e-4)
    assert df.loc["atlas_text", "ratio"] == pytest.approx(df.loc["atlas_text", "cpu_s"] / df.loc["plain", "cpu_s"], rel=0.02)
