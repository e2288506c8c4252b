"""The patching analyses in quick mode: ``analyses/benchmarks/patch_cost.py`` (ratios measured in one run, the fast
path equal to the naive loop) and ``analyses/effects/patching_zoo.py`` (head tables joined with the atlas, path
patching rows, a summary whose numbers are the rows')."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.conftest import load_script

ROOT = Path(__file__).resolve().parents[1]


def test_benchmark_quick_mode(tmp_path):
    mod = load_script(ROOT / "analyses" / "benchmarks" / "patch_cost.py")
    df = mod.main(["--quick", "--out", str(tmp_path)]).set_index("run")
    assert list(df.index) == ["forward", "patch", "naive", "attribution"]
    back = pd.read_csv(tmp_path / "patch_cost.csv").set_index("run")
    assert back.loc["forward", "ratio"] == 1.0
    for run in ("patch", "naive", "attribution"):
        assert df.loc[run, "ratio"] == pytest.approx(df.loc[run, "seconds"] / df.loc["forward", "seconds"], rel=1e-6)
    assert df.loc["patch", "max_abs_diff"] < 1e-4 and not df.loc["naive", "extrapolated"]
    assert -1 <= df.loc["attribution", "spearman"] <= 1


def test_patching_zoo_quick_mode(tmp_path):
    mod = load_script(ROOT / "analyses" / "effects" / "patching_zoo.py")
    summary = mod.main(["--quick", "--out", str(tmp_path)]).set_index("task")
    heads = pd.read_csv(tmp_path / "patch_heads.csv")
    paths = pd.read_csv(tmp_path / "patch_paths.csv")
    assert len(heads) == 2 * 4 and set(heads["task"]) == {"induction"}  # tiny-llama: 2 layers x 4 heads
    assert {"role_induction", "rr_induction_score", "attribution_recovered"} <= set(heads.columns)  # its quick atlas
    row = summary.loc["induction"]
    top = heads.sort_values("recovered", ascending=False).head(5)
    assert row["top_heads"] == " ".join(f"L{l}H{h}" for l, h in zip(top["layer"], top["head"]))
    # recovered from the per-head ld and the clean / corrupt means the summary states
    r = (heads["ld"] - row["corrupt_ld"]) / (row["clean_ld"] - row["corrupt_ld"])
    np.testing.assert_allclose(heads["recovered"], r, rtol=1e-9, atol=1e-12)
    assert set(paths["via"]) == {"q", "k", "v"} and (paths["receiver_layer"] > paths["sender_layer"]).all()
