"""Quick mode of analyses/p003_sparsity/ppc_scratchpad.py (paper 003 Sec. 5.2: parity and variable assignment with scratchpad)."""

from pathlib import Path

import numpy as np
import pandas as pd

from tests.conftest import load_script

ROOT = Path(__file__).resolve().parents[1]


def test_quick_ppc_scratchpad_over_seeds_and_resume(tmp_path):
    mod = load_script(ROOT / "analyses" / "p003_sparsity/ppc_scratchpad.py")
    df = mod.main(["--quick", "--out", str(tmp_path)])
    csv = pd.read_csv(tmp_path / "ppc.csv")
    assert list(csv.columns) == mod.COLUMNS and len(csv) == len(df)
    assert csv.exact_match.between(0, 1).all() and set(csv.seed) == {0, 1}
    par, va = csv[csv.task == "parity"], csv[csv.task == "va"]
    assert set(par.method) == {"ppc", "absolute", "rope_pose"} and set(va.method) == {"ppc", "absolute"}
    assert par.depth.isna().all() and par.jump.notna().all() and va.jump.isna().all() and va.depth.notna().all()
    assert len(par) == 3 * 5 * 2 and len(va) == 2 * 4 * 2  # methods x bins x seeds
    # the summary's mean and sd are over the seeds of each cell, recomputed here by hand
    s = mod.summary(csv)
    cell = csv[(csv.task == "va") & (csv.method == "ppc") & (csv.length_lo == 20)].exact_match.to_numpy()
    row = s[(s.task == "va") & (s.method == "ppc") & (s.length_lo == 20)].iloc[0]
    assert row.n == 2 and np.isclose(row["mean"], cell.mean()) and np.isclose(row["std"], cell.std(ddof=1))
    # a second run keeps the finished jobs instead of retraining them
    again = mod.main(["--quick", "--out", str(tmp_path)])
    assert len(again) == len(csv) and (tmp_path / "ppc.html").exists()
    summ = pd.read_csv(tmp_path / "ppc_summary.csv")
    assert len(summ) == len(s) and summ["n"].eq(2).all()


def test_pose_ids_are_pose_rows():
    mod = load_script(ROOT / "analyses" / "p003_sparsity/ppc_scratchpad.py")
    from interp.lab import ppc
    rng = np.random.default_rng(0)
    b = ppc.ppc_batch(rng, 16, (5, 20), 1, coupled=False, shift=False)
    out = mod.pose_ids(b, rng, 210, cap=1000)
    for r in range(16):
        n = int((b["input_ids"][r] != 0).sum())
        p = out["position_ids"][r, :n].numpy()
        d = np.diff(p)
        assert p[0] == 0 and (d >= 1).all() and (d > 1).sum() <= 1 and p[-1] <= 209  # two chunks, PoSE's law
    assert (out["input_ids"] == b["input_ids"]).all() and (out["loss_mask"] == b["loss_mask"]).all()
