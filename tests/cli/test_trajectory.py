"""``interp trajectory``: a folder of saved checkpoints gives the table of scanning each by hand; bad input (a folder
with no model, mixed architectures, a revision that does not exist) is one line and exit 2 before any scan."""

from __future__ import annotations

import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

from interp.cli import app
from interp.engine import ScanConfig, scan
from interp.experiments import trajectory as T
from interp.lab import LabConfig, LabForCausalLM, Vocab, lab_loaded, save_lab
from interp.models import load_model

runner = CliRunner()
VOCAB = Vocab([f"t{i}" for i in range(20)])


def _save(path, layers=2, seed=0):
    torch.manual_seed(seed)
    m = LabForCausalLM(LabConfig(vocab_size=len(VOCAB), n_layers=layers, n_heads=2, d_model=32, d_mlp=64, max_positions=64))
    save_lab(m, VOCAB, path)


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_trajectory_of_saved_checkpoints_equals_scanning_each_by_hand(tmp_path):
    for step, seed in ((10, 1), (2, 0), (100, 2)):  # written out of order: the command sorts by step
        _save(tmp_path / "run" / f"step-{step}", seed=seed)
    res = runner.invoke(app, ["trajectory", str(tmp_path / "run"), "--prompts", "3", "--tokens", "24", "--engine", "python",
                              "--device", "cpu", "--out", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    traj = pd.read_csv(tmp_path / "out" / "trajectory.csv")
    assert traj["step"].unique().tolist() == [2, 10, 100] and (tmp_path / "out" / "trajectory.html").exists()
    from interp import corpus

    cfg = ScanConfig(token_match=True, shape=True)
    for step in (2, 10, 100):
        m = load_model(f"local:{tmp_path / 'run' / f'step-{step}'}", device="cpu")
        by_hand = scan(m, corpus.prompts(m, "repeated-random", 3, 24, 0), cfg, engine="python").heads
        rows = traj[traj["step"] == step].reset_index(drop=True)
        for col in ("slash_d1", "prev_token_score", "induction_score", "entropy", "sink_weight", "r1_q"):
            assert rows[col].to_numpy() == pytest.approx(by_hand[col].to_numpy(), rel=1e-6, abs=1e-9), col


@pytest.mark.parametrize("case, message", [
    ("empty", "holds no model"),
    ("mixed", "mixed architectures"),
    ("missing", "revision(s) step-7 not found"),
    ("hub", "not in the local Hugging Face cache"),
])
def test_bad_input_is_one_line_exit_2_before_any_scan(tmp_path, monkeypatch, case, message):
    called = []
    monkeypatch.setattr(T, "scan_rows", lambda *a, **k: called.append(1))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    src, extra = tmp_path / "run", []
    src.mkdir()
    if case == "mixed":
        _save(src / "step-1")
        _save(src / "step-2", layers=1)
    elif case == "missing":
        _save(src / "step-1")
        extra = ["--revisions", "step-1,step-7"]
    elif case == "hub":
        monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
        import huggingface_hub.constants as C

        monkeypatch.setattr(C, "HF_HUB_CACHE", str(tmp_path / "hub"))
        src, extra = "org/none", ["--revisions", "step1"]
    res = runner.invoke(app, ["trajectory", str(src), *extra, "--out", str(tmp_path / "out")])
    assert res.exit_code == 2 and message in res.output and "Traceback" not in res.output, res.output
    assert len(res.output.strip().splitlines()) == 1 and not called
