"""Issue 49: ``python -m interp.lab.checkpoints`` trains a lab model and saves checkpoints with their training log,
quietly; ``interp trajectory`` on that folder fills its loss panel and ``train_loss`` column."""

from __future__ import annotations

import pandas as pd
import pytest
from typer.testing import CliRunner

from interp.cli import app as interp_app
from interp.experiments.trajectory import TRAIN_LOG, TrajectoryError, add_train_loss, training_log
from interp.lab.checkpoints import app, train_checkpoints

runner = CliRunner()
TINY = ["--steps", "6", "--save-every", "3", "--layers", "2", "--heads", "2", "--d-model", "16", "--length", "32",
        "--batch", "2"]


def test_the_recipe_saves_checkpoints_and_a_log_that_fill_the_trajectory(tmp_path, capfd):
    run = tmp_path / "run"
    res = runner.invoke(app, [str(run), *TINY])
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in run.iterdir()) == ["step-0", "step-3", "step-6", TRAIN_LOG]
    lines = res.output.strip().splitlines()
    assert len(lines) == 4 and lines[0].startswith("step 0/6: untrained") and "next: interp trajectory" in lines[-1]
    assert "Writing model shards" not in res.output + "".join(capfd.readouterr())  # quiet: no progress bars
    log = pd.read_csv(run / TRAIN_LOG)
    assert log["step"].tolist() == list(range(1, 7)) and log["loss"].gt(0).all()

    out = tmp_path / "traj"
    res = runner.invoke(interp_app, ["trajectory", str(run), "--prompts", "2", "--tokens", "16", "--engine", "python",
                                     "--device", "cpu", "--out", str(out)])
    assert res.exit_code == 0, res.output
    traj = pd.read_csv(out / "trajectory.csv")
    assert list(traj.columns[:4]) == ["step", "revision", "train_loss", "scan_seconds"]
    per_step = traj.groupby("step")["train_loss"].first()
    assert per_step.index.tolist() == [0, 3, 6] and pd.isna(per_step[0])
    assert per_step[3] == pytest.approx(log.set_index("step")["loss"][3]) and per_step[6] == pytest.approx(log["loss"].iloc[-1])
    assert '"mode":"lines","name":"training loss"' in (out / "trajectory.html").read_text()  # every logged step, not the scans


@pytest.mark.parametrize("args, message", [
    (["--save-every", "0"], "--save-every must be at least 1, got 0"),
    (["--d-model", "10"], "--d-model 10 must split into 4 heads of an even width"),
    (["--repeat-frac", "1.5"], "--repeat-frac must lie in [0, 1], got 1.5"),
    (["--corpus", "web"], "--corpus 'web': use pydoc or stdlib"),
    (["--device", "tpu"], "--device 'tpu': use cpu"),
])
def test_bad_input_is_one_line_exit_2_before_training(tmp_path, args, message):
    res = runner.invoke(app, [str(tmp_path / "run"), *args])
    assert res.exit_code == 2 and message in res.output and len(res.output.strip().splitlines()) == 1, res.output
    assert not (tmp_path / "run").exists()


def test_a_folder_with_checkpoints_is_refused(tmp_path):
    (tmp_path / "step-0").mkdir()
    res = runner.invoke(app, [str(tmp_path), *TINY])
    assert res.exit_code == 2 and "already holds checkpoints" in res.output


def test_training_log_reading(tmp_path):
    assert training_log(tmp_path) is None and training_log("ORG/NAME") is None
    (tmp_path / TRAIN_LOG).write_text("step,loss\n2,1.5\n1,2.0\n")
    log = training_log(tmp_path)
    assert log["step"].tolist() == [1, 2]
    traj = pd.DataFrame({"step": [0, 2, 5], "revision": ["a", "b", "c"], "scan_seconds": 0.1, "layer": 0})
    assert add_train_loss(traj, log)["train_loss"].tolist()[1] == 1.5 and add_train_loss(traj, log)["train_loss"].isna().sum() == 2
    (tmp_path / TRAIN_LOG).write_text("step,nll\n1,2.0\n")
    with pytest.raises(TrajectoryError, match="needs step and loss"):
        training_log(tmp_path)


def test_the_api_returns_the_log(tmp_path):
    log = train_checkpoints(tmp_path / "r", steps=2, save_every=5, layers=1, heads=2, d_model=16, length=16, batch=2, log=None)
    assert log["step"].tolist() == [1, 2] and sorted(p.name for p in (tmp_path / "r").glob("step-*")) == ["step-0", "step-2"]


def test_the_recipe_is_in_the_help_and_the_getting_started_page():
    from pathlib import Path

    res = runner.invoke(interp_app, ["trajectory", "--help"], env={"COLUMNS": "200"})
    assert "python -m interp.lab.checkpoints runs/induction --steps 300 --save-every 50" in res.output
    page = (Path(__file__).resolve().parents[2] / "docs" / "getting-started.md").read_text()
    assert "python -m interp.lab.checkpoints runs/induction --steps 300 --save-every 50" in page
