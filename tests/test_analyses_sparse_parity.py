"""analyses/p003_sparsity/sparse_parity.py (paper 003 Sec. 5.1): the k = 1 side run and seeds run in pieces merge into one table."""

from pathlib import Path

import numpy as np
import pandas as pd

from tests.conftest import load_script

SCRIPT = Path(__file__).resolve().parents[1] / "analyses" / "p003_sparsity/sparse_parity.py"


def test_quick_k1_side_run_keeps_the_other_rows_and_summarises_over_seeds(tmp_path):
    mod = load_script(SCRIPT)
    # a K_train = 4 table with two seeds already there: the k = 1 run must keep both
    rows = [dict(k_train=4, k_test=k, length_lo=lo, length_hi=hi, accuracy=acc, seed=s)
            for s, acc in ((0, 0.5), (1, 1.0)) for k in range(1, 9) for lo, hi in mod.SP_BINS]
    pd.DataFrame(rows).to_csv(tmp_path / "sparse_parity.csv", index=False)
    new = mod.main(["--quick", "--out", str(tmp_path), "--k-train", "1"])
    assert set(new.k_train) == {1} and len(new) == 8 * len(mod.SP_BINS) and new.accuracy.between(0, 1).all()
    table = pd.read_csv(tmp_path / "sparse_parity.csv")
    assert table.groupby(["k_train", "seed"]).size().to_dict() == {(1, 0): 48, (4, 0): 48, (4, 1): 48}
    assert list(table.k_train.drop_duplicates()) == [4, 1]           # the paper's K_train first
    summ = pd.read_csv(tmp_path / "sparse_parity_summary.csv")
    four = summ[summ.k_train == 4]
    assert (four.seeds == 2).all() and np.allclose(four["mean"], 0.75) and np.allclose(four.sd, np.std([0.5, 1.0], ddof=1))
    one = summ[summ.k_train == 1].merge(new, on=["k_test", "length_lo", "length_hi"])
    assert (one.seeds == 1).all() and np.allclose(one["mean"], one.accuracy) and one.sd.isna().all()
    # the figure is the K_train = 4 heatmap, written because those rows exist
    assert (tmp_path / "sparse_parity.html").exists()  # the PNG too where kaleido is installed
