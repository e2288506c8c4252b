"""The massive-value destruction experiment and its analysis script (quick mode, on a tiny model)."""

import time
from pathlib import Path

import numpy as np
import torch

from interp.engine import ScanConfig
from interp.experiments.massive import destruction, massive_channels, random_channels
from tests.conftest import load_script, random_tokens

SCRIPT = Path(__file__).resolve().parents[2] / "analyses" / "atlas/massive_values.py"


def test_random_control_draws_as_many_other_channels():
    m = torch.zeros(3, 4, 16, dtype=torch.bool)
    m[0, 1, [3, 7]] = True
    m[2, 0, 15] = True
    r = random_channels({"q": m}, seed=1)["q"]
    assert torch.equal(r.sum(-1), m.sum(-1)) and not (r & m).any()
    assert torch.equal(r, random_channels({"q": m}, seed=1)["q"])


def test_destruction_on_a_tiny_model(tiny_llama):
    torch.set_num_threads(1)
    prompts = [random_tokens(40, seed=1), random_tokens(30, seed=2)]
    d = destruction(tiny_llama, prompts, lam=1.1, cfg=ScanConfig(block_size=8))
    s = d.summary.set_index("condition")
    assert list(s.index) == ["baseline", "massive", "random"] and s.loc["baseline", "delta_nll"] == 0
    found = massive_channels(d.base, 1.1)
    assert s.loc["massive", "q_channels"] == int(found["q"].sum()) > 0
    assert s.loc["random", "q_channels"] == s.loc["massive", "q_channels"]
    assert s.loc["random", "k_channels"] == s.loc["massive", "k_channels"]
    assert np.isfinite(s["nll"]).all() and s.loc["massive", "delta_nll"] != 0
    assert {"slash_score", "sink_weight", "massive_q_count"} <= set(d.scores["column"])


def test_analysis_quick_mode(tmp_path):
    t0 = time.perf_counter()
    out = load_script(SCRIPT).main(["--quick", "--models", "tiny-llama", "--out", str(tmp_path)])
    assert time.perf_counter() - t0 < 60
    for f in ("massive_values_tiny-llama.csv", "massive_values_tiny-llama.html", "massive_values_summary.csv",
              "massive_values_destruction.csv", "massive_values_scores.csv"):
        assert (tmp_path / f).exists(), f
    p = out["planes"]["tiny-llama"]
    assert set(p["kind"]) == {"q_pre", "q_rot", "k_pre", "k_rot", "v"} and (p["inv_freq"] > 0).all()
    assert list(out["destruction"]["condition"]) == ["baseline", "massive", "random"]
