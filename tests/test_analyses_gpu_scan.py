"""The GPU benchmark's quick mode runs on the CPU and writes its table (the full run needs a CUDA GPU)."""

import importlib.util
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1] / "analyses"


def test_gpu_scan_quick_mode_writes_its_table(tmp_path):
    spec = importlib.util.spec_from_file_location("gpu_scan", ROOT / "benchmarks" / "gpu_scan.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    df = mod.main(["--quick", "--out", str(tmp_path)])
    on_disk = (tmp_path / "gpu_scan.csv").read_text()
    assert list(df["tokens"]) == [32, 64] and (df["status"] == "ok").all()
    assert np.isfinite(df["ratio"]).all() and (df["forward_s"] > 0).all()
    assert "scan_all_s" in on_disk and "ratio_all" in on_disk
    # the taps split from the model's own layers; each measure's update and the taps' parts in ph_detail
    assert (df["ph_taps_s"] > 0).all() and (df["cf_rows"] == "none (CPU)").all()
    for part in ("measures/spectrum", "measures/cone", "taps/pre", "taps/copies"):
        assert df["ph_detail"].str.contains(part, regex=False).all(), part
    phases = df[[c for c in df.columns if c.startswith("ph_") and c.endswith("_s")]]
    assert (phases.drop(columns="ph_model_s") >= 0).all().all()
