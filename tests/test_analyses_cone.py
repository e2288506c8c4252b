"""The PCA-snapshot and embedding-cone analysis scripts in quick mode (tiny models): they run and write what they say."""

from pathlib import Path

import numpy as np
import pandas as pd

from tests.conftest import load_script

ROOT = Path(__file__).resolve().parents[1] / "analyses"


def test_quick_pca_snapshot(tmp_path):
    df = load_script(ROOT / "p001_frayed/pca_snapshot.py").main(["--quick", "--out", str(tmp_path)])
    assert list(df["n"]) == [32, 32, 64, 64] and list(df["rope"]) == [False, True, False, True]
    assert ((df["srank_k"] >= 1) & (df["srank_all"] >= df[["srank_k", "srank_q"]].min(axis=1) - 1e-9)).all()
    assert (tmp_path / "pca_snapshot_tiny-llama.html").exists()
    assert pd.read_csv(tmp_path / "pca_snapshot.csv").shape[0] == 4


def test_quick_embedding_cone(tmp_path):
    summ = load_script(ROOT / "p004_slash/embedding_cone.py").main(["--quick", "--out", str(tmp_path)])
    assert set(summ["model"]) == {"tiny-llama", "tiny-qwen2", "tiny-gemma3"}
    per = pd.read_csv(tmp_path / "embedding_cone_tiny-qwen2.csv")
    assert len(per) == 4 and per["bias_k"].notna().all() and np.isfinite(per["rv_q"]).all() and "is_sdh" in per
    assert pd.read_csv(tmp_path / "embedding_cone_tiny-llama.csv")["bias_q"].isna().all()
    assert (tmp_path / "embedding_cone_fig12_13.html").exists()
