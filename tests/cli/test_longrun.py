"""Long runs of interp scan / effects (issue 46): finished units kept in OUT, --resume equal to an uninterrupted run,
a partial OUT refused without --resume / --force, Ctrl-C writing partial tables with exit 130."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from interp.cli import app
from interp.cli.longrun import Interrupted, RunDir, first_difference
from interp.errors import InterpError

runner = CliRunner()
# the Python engine is deterministic; the fused CPU kernel's threads can differ run to run at float rounding (~1e-8),
# so with it a resumed run equals an uninterrupted one to that noise, as two uninterrupted runs do
SCAN = ["scan", "tiny-llama", "--prompts", "3", "--tokens", "48", "--corpus", "stdlib", "--engine", "python"]
EFFECTS = ["effects", "tiny-llama", "--prompts", "3", "--tokens", "24", "--bootstrap", "50"]


def _fail_at(monkeypatch, module, name: str, k: int, exc: BaseException):
    """Replace ``module.name`` by a wrapper that raises ``exc`` on its call number ``k + 1`` (the first k run)."""
    orig, calls = getattr(module, name), {"n": 0}

    def wrapped(*a, **kw):
        calls["n"] += 1
        if calls["n"] > k:
            raise exc
        return orig(*a, **kw)

    monkeypatch.setattr(module, name, wrapped)


def test_scan_interrupted_then_resumed_equals_one_run(tmp_path, monkeypatch):
    import interp.engine

    full, part = tmp_path / "full", tmp_path / "part"
    assert runner.invoke(app, SCAN + ["--out", str(full)]).exit_code == 0
    with monkeypatch.context() as mp:  # Ctrl-C while the third prompt runs
        _fail_at(mp, interp.engine, "scan", 2, Interrupted(signal.SIGINT))
        res = runner.invoke(app, SCAN + ["--out", str(part)])
    assert res.exit_code == 130, res.output
    assert "partial: 2 of 3 prompts" in res.output and "--resume" in res.output and "Traceback" not in res.output
    assert json.loads((part / "state" / "scan.json").read_text())["meta"]["partial"] == "2 of 3 prompts"
    assert "Partial run: 2 of 3 prompts" in (part / "report.html").read_text()
    assert len(pd.read_csv(part / "heads.csv")) == 2 * 4
    # without --resume: refused before the model loads
    with monkeypatch.context() as mp:
        _fail_at(mp, interp.models, "load_model", 0, AssertionError("the model must not load"))
        res = runner.invoke(app, SCAN + ["--out", str(part)])
    assert res.exit_code == 2 and "--resume" in res.output and "--force" in res.output and len(res.output.strip().splitlines()) == 1
    # resumed: the two finished prompts are read back, the third scanned; heads.csv equals the uninterrupted run's
    with monkeypatch.context() as mp:
        _fail_at(mp, interp.engine, "scan", 1, AssertionError("only the third prompt is scanned"))
        res = runner.invoke(app, SCAN + ["--out", str(part), "--resume"])
    assert res.exit_code == 0, res.output
    pd.testing.assert_frame_equal(pd.read_csv(full / "heads.csv"), pd.read_csv(part / "heads.csv"), check_exact=True)
    assert "partial" not in json.loads((part / "state" / "scan.json").read_text())["meta"]
    assert json.loads((part / "run.json").read_text())["complete"] is True


def test_scan_crash_leaves_units_and_a_half_written_unit_is_redone(tmp_path, monkeypatch):
    import interp.engine

    out = tmp_path / "crash"
    with monkeypatch.context() as mp:  # a crash (not a signal): the process dies with the second prompt in flight
        _fail_at(mp, interp.engine, "scan", 1, RuntimeError("out of memory"))
        res = runner.invoke(app, SCAN + ["--out", str(out)])
    assert res.exit_code != 0 and not (out / "heads.csv").exists()
    assert sorted(p.name for p in (out / "units").iterdir()) == ["prompt-00000"]
    (out / "units" / ".prompt-00001.dead.tmp").mkdir()  # what a kill during the unit's write leaves
    # settings other than the manifest's: one line naming the first difference
    res = runner.invoke(app, SCAN[:6] + ["--corpus", "pydoc", "--engine", "python", "--out", str(out), "--resume"])
    assert res.exit_code == 2 and "--corpus is 'pydoc' here but 'stdlib'" in res.output
    res = runner.invoke(app, SCAN + ["--out", str(out), "--resume", "--force"])
    assert res.exit_code == 2 and "contradict" in res.output
    res = runner.invoke(app, SCAN + ["--out", str(out), "--resume"])
    assert res.exit_code == 0, res.output
    assert len(RunDir(out, "scan", {}).finished()) == 3 and not (out / "units" / ".prompt-00001.dead.tmp").exists()
    # --force discards the run and starts over
    res = runner.invoke(app, SCAN + ["--prompts", "2", "--out", str(out), "--force"])
    assert res.exit_code == 0 and len(list((out / "units").iterdir())) == 2


def test_effects_interrupted_then_resumed_equals_one_run(tmp_path, monkeypatch):
    import interp.experiments.effects as fx

    full, part = tmp_path / "full", tmp_path / "part"
    calls = {"n": 0}
    orig = fx.token_stats

    def counting(*a, **kw):
        calls["n"] += 1
        return orig(*a, **kw)

    with monkeypatch.context() as mp:
        mp.setattr(fx, "token_stats", counting)
        assert runner.invoke(app, EFFECTS + ["--out", str(full)]).exit_code == 0
    per_layer = calls["n"] // 2  # tiny-llama: 2 layers, the same forwards each
    with monkeypatch.context() as mp:  # SIGTERM during layer 1
        _fail_at(mp, fx, "token_stats", per_layer, Interrupted(signal.SIGTERM))
        res = runner.invoke(app, EFFECTS + ["--out", str(part)])
    assert res.exit_code == 143, res.output
    assert "partial: 1 of 2 layers" in res.output and "--resume" in res.output
    assert json.loads((part / "effects.json").read_text())["partial"] == "1 of 2 layers"
    assert set(pd.read_csv(part / "effects.csv")["layer"]) == {0}
    res = runner.invoke(app, EFFECTS[:-2] + ["--bootstrap", "60", "--out", str(part), "--resume"])
    assert res.exit_code == 2 and "--bootstrap is 60 here but 50" in res.output
    with monkeypatch.context() as mp:  # resumed: only layer 1 runs
        _fail_at(mp, fx, "token_stats", per_layer, AssertionError("layer 0 is read back"))
        res = runner.invoke(app, EFFECTS + ["--out", str(part), "--resume"])
    assert res.exit_code == 0, res.output
    pd.testing.assert_frame_equal(pd.read_csv(full / "effects.csv"), pd.read_csv(part / "effects.csv"), check_exact=True)
    res = runner.invoke(app, EFFECTS + ["--method", "naive", "--out", str(part), "--resume"])
    assert res.exit_code == 2 and "--method exact" in res.output


def test_first_difference_and_manifest(tmp_path):
    assert first_difference({"a": 1, "tokens": 2}, {"a": 1, "tokens": 3}) == "--tokens is 3 here but 2 in the run being resumed"
    assert first_difference({"a": 1}, {"a": 1}) is None
    assert RunDir(Path("/nonexistent/x"), "scan", {}).finished() == []
    RunDir(tmp_path, "scan", {"tokens": 8}).begin({"name": "m", "sha256": "aa"}, 2)
    resumed = RunDir(tmp_path, "scan", {"tokens": 8}, resume=True)
    resumed.check()
    with pytest.raises(InterpError, match="the model's sha256 is 'bb' here but 'aa'"):
        resumed.begin({"name": "m", "sha256": "bb"}, 2)
    with pytest.raises(InterpError, match="holds an interp scan run, not interp effects"):
        RunDir(tmp_path, "effects", {"tokens": 8}, resume=True).check()


def test_sigint_in_a_subprocess_exits_130_with_partial_tables(tmp_path):
    out = tmp_path / "sig"
    exe = Path(sys.executable).with_name("interp")
    proc = subprocess.Popen([str(exe), "scan", "tiny-llama", "--prompts", "200", "--tokens", "128", "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "COLUMNS": "200"})
    deadline = time.monotonic() + 120
    while not (out / "units" / "prompt-00001").exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stdout + stderr
    assert "partial: " in stdout and " of 200 prompts" in stdout and "--resume" in stdout
    assert "Traceback" not in stdout + stderr
    meta = json.loads((out / "state" / "scan.json").read_text())["meta"]
    assert meta["partial"].endswith("of 200 prompts") and meta["prompts"] >= 2
    assert "Partial run" in (out / "report.html").read_text()


def test_sigkill_then_resume_equals_one_run(tmp_path):
    """The issue's scenario on the tiny model: the process killed outright (no handler runs), then --resume."""
    args = ["scan", "tiny-llama", "--prompts", "8", "--tokens", "192", "--corpus", "stdlib", "--engine", "python"]
    killed, full = tmp_path / "killed", tmp_path / "full"
    exe = Path(sys.executable).with_name("interp")
    proc = subprocess.Popen([str(exe), *args, "--out", str(killed)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not (killed / "units" / "prompt-00000").exists():
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.02)
    proc.kill()
    proc.wait(timeout=60)
    assert json.loads((killed / "run.json").read_text())["complete"] is False and not (killed / "heads.csv").exists()
    # both in fresh processes like the killed one (threaded kernels in another setting agree to float rounding only)
    res = subprocess.run([str(exe), *args, "--out", str(killed), "--resume"], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    assert subprocess.run([str(exe), *args, "--out", str(full)], capture_output=True).returncode == 0
    pd.testing.assert_frame_equal(pd.read_csv(full / "heads.csv"), pd.read_csv(killed / "heads.csv"), check_exact=True)


PAIRS = [{"clean": "abcdef", "corrupt": "abqdef", "answer": "x", "wrong": "y"},
         {"clean": "zbcdeg", "corrupt": "zbkdeg", "answer": "u", "wrong": "w"},
         {"clean": "hbcdeh", "corrupt": "hbcpeh", "answer": "x", "wrong": "u"}]


def _patch_args(tmp_path, pairs=PAIRS):
    f = tmp_path / "pairs.jsonl"
    f.write_text("".join(json.dumps(p) + "\n" for p in pairs))
    return ["patch", "tiny-llama", "--pairs", str(f), "--bootstrap", "50"]


def test_patch_interrupted_then_resumed_equals_one_run(tmp_path, monkeypatch):
    import interp.experiments.patching as pt
    import interp.models

    args = _patch_args(tmp_path)
    full, part = tmp_path / "full", tmp_path / "part"
    assert runner.invoke(app, args + ["--out", str(full)]).exit_code == 0
    with monkeypatch.context() as mp:  # Ctrl-C in layer 1's patched forward (tiny-llama: one forward per layer)
        _fail_at(mp, pt, "start_at", 1, Interrupted(signal.SIGINT))
        res = runner.invoke(app, args + ["--out", str(part)])
    assert res.exit_code == 130, res.output
    assert "partial: 1 of 2 layers" in res.output and "--resume" in res.output and "Traceback" not in res.output
    assert json.loads((part / "patch.json").read_text())["partial"] == "1 of 2 layers"
    assert "Partial run: 1 of 2 layers" in (part / "patch.html").read_text()
    assert set(pd.read_csv(part / "patch.csv")["layer"]) == {0}
    with monkeypatch.context() as mp:  # without --resume: refused before the model loads
        _fail_at(mp, interp.models, "load_model", 0, AssertionError("the model must not load"))
        res = runner.invoke(app, args + ["--out", str(part)])
    assert res.exit_code == 2 and "--resume" in res.output and "--force" in res.output and len(res.output.strip().splitlines()) == 1
    res = runner.invoke(app, args + ["--direction", "noise", "--out", str(part), "--resume"])
    assert res.exit_code == 2 and "--direction is 'noise' here but 'denoise'" in res.output
    with monkeypatch.context() as mp:  # resumed: only layer 1 is patched
        _fail_at(mp, pt, "start_at", 1, AssertionError("layer 0 is read back"))
        res = runner.invoke(app, args + ["--out", str(part), "--resume"])
    assert res.exit_code == 0, res.output
    pd.testing.assert_frame_equal(pd.read_csv(full / "patch.csv"), pd.read_csv(part / "patch.csv"), check_exact=True)
    assert "partial" not in json.loads((part / "patch.json").read_text())
    assert json.loads((part / "run.json").read_text())["complete"] is True
    res = runner.invoke(app, args + ["--method", "naive", "--out", str(part), "--resume"])
    assert res.exit_code == 2 and "--method exact" in res.output


def test_patch_two_token_lengths_resume_skips_finished_passes(tmp_path, monkeypatch):
    """Pairs of two token lengths: a layer is finished once both lengths ran it; a length whose layers are all kept
    skips its unpatched passes too."""
    import interp.experiments.patching as pt

    args = _patch_args(tmp_path, PAIRS + [{"clean": "abcdefgh", "corrupt": "abcxefgh", "answer": "x", "wrong": "y"}])
    full, part = tmp_path / "full", tmp_path / "part"
    assert runner.invoke(app, args + ["--out", str(full)]).exit_code == 0
    with monkeypatch.context() as mp:  # SIGTERM in the second length's layer 0: no layer finished for both lengths
        _fail_at(mp, pt, "start_at", 2, Interrupted(signal.SIGTERM))
        res = runner.invoke(app, args + ["--out", str(part)])
    assert res.exit_code == 143 and "partial: 0 of 2 layers" in res.output, res.output
    assert not (part / "patch.csv").exists() and len(RunDir(part, "patch", {}).finished()) == 2
    passes = {"n": 0}
    orig = pt.run_cached

    def counting(*a, **kw):
        passes["n"] += 1
        return orig(*a, **kw)

    with monkeypatch.context() as mp:  # resumed: the first length is read back whole, the second length's two layers run
        mp.setattr(pt, "run_cached", counting)
        _fail_at(mp, pt, "start_at", 2, AssertionError("the first length is read back"))
        res = runner.invoke(app, args + ["--out", str(part), "--resume"])
    assert res.exit_code == 0, res.output
    assert passes["n"] == 2  # the second length's base and source passes only
    pd.testing.assert_frame_equal(pd.read_csv(full / "patch.csv"), pd.read_csv(part / "patch.csv"), check_exact=True)
    meta_full, meta_part = (json.loads((d / "patch.json").read_text()) for d in (full, part))
    assert meta_full["clean_metric"] == meta_part["clean_metric"] and meta_full["corrupt_metric"] == meta_part["corrupt_metric"]


SWEEP = ["sweep", "tiny-llama", "--lengths", "16,32", "--prompts", "2", "--corpus", "stdlib", "--cluster-points", "20"]


def test_sweep_interrupted_then_resumed_equals_one_run(tmp_path, monkeypatch):
    import interp.engine
    import interp.models

    full, part = tmp_path / "full", tmp_path / "part"
    assert runner.invoke(app, SWEEP + ["--out", str(full)]).exit_code == 0
    with monkeypatch.context() as mp:  # Ctrl-C while length 32's second prompt is scanned (units: prompt x length)
        _fail_at(mp, interp.engine, "scan", 3, Interrupted(signal.SIGINT))
        res = runner.invoke(app, SWEEP + ["--out", str(part)])
    assert res.exit_code == 130, res.output
    assert "partial: 1 of 2 lengths" in res.output and "--resume" in res.output and "Traceback" not in res.output
    assert json.loads((part / "sweep.json").read_text()) == {"lengths": [16], "partial": "1 of 2 lengths"}
    assert "Partial run: 1 of 2 lengths" in (part / "sweep.html").read_text()
    assert set(pd.read_csv(part / "sweep.csv")["length"]) == {16}
    assert RunDir(part, "sweep", {}).finished() == ["length-000016-prompt-00000", "length-000016-prompt-00001",
                                                   "length-000032-prompt-00000"]
    with monkeypatch.context() as mp:  # without --resume: refused before the model loads
        _fail_at(mp, interp.models, "load_model", 0, AssertionError("the model must not load"))
        res = runner.invoke(app, SWEEP + ["--out", str(part)])
    assert res.exit_code == 2 and "--resume" in res.output and "--force" in res.output and len(res.output.strip().splitlines()) == 1
    res = runner.invoke(app, SWEEP[:3] + ["16,24"] + SWEEP[4:] + ["--out", str(part), "--resume"])
    assert res.exit_code == 2 and "--lengths is [16, 24] here but [16, 32]" in res.output
    with monkeypatch.context() as mp:  # resumed: only length 32's second prompt is scanned
        _fail_at(mp, interp.engine, "scan", 1, AssertionError("finished prompts are read back"))
        res = runner.invoke(app, SWEEP + ["--out", str(part), "--resume"])
    assert res.exit_code == 0, res.output
    pd.testing.assert_frame_equal(pd.read_csv(full / "sweep.csv"), pd.read_csv(part / "sweep.csv"), check_exact=True)
    assert json.loads((part / "sweep.json").read_text()) == {"lengths": [16, 32]}
    assert json.loads((part / "run.json").read_text())["complete"] is True


def _checkpoints(root: Path, steps=(1, 2, 3)) -> Path:
    import torch

    from interp.lab import LabConfig, LabForCausalLM, Vocab, save_lab

    vocab = Vocab([f"t{i}" for i in range(20)])
    for step in steps:
        torch.manual_seed(step)
        save_lab(LabForCausalLM(LabConfig(vocab_size=20, n_layers=1, n_heads=2, d_model=16, d_mlp=32, max_positions=64)),
                 vocab, root / f"step-{step}")
    return root


def test_trajectory_interrupted_then_resumed_equals_one_run(tmp_path, monkeypatch):
    import interp.experiments.trajectory as tj
    import interp.models

    args = ["trajectory", str(_checkpoints(tmp_path / "ckpt")), "--prompts", "2", "--tokens", "16", "--engine", "python"]
    full, part = tmp_path / "full", tmp_path / "part"
    assert runner.invoke(app, args + ["--out", str(full)]).exit_code == 0
    with monkeypatch.context() as mp:  # Ctrl-C while the third checkpoint is scanned
        _fail_at(mp, tj, "scan_rows", 2, Interrupted(signal.SIGINT))
        res = runner.invoke(app, args + ["--out", str(part)])
    assert res.exit_code == 130, res.output
    assert "partial: 2 of 3 checkpoints" in res.output and "--resume" in res.output and "Traceback" not in res.output
    assert set(pd.read_csv(part / "trajectory.csv")["revision"]) == {"step-1", "step-2"}
    assert "Partial run: 2 of 3 checkpoints" in (part / "trajectory.html").read_text()
    with monkeypatch.context() as mp:  # without --resume: refused before any checkpoint loads
        _fail_at(mp, interp.models, "load_model", 0, AssertionError("no checkpoint may load"))
        res = runner.invoke(app, args + ["--out", str(part)])
    assert res.exit_code == 2 and "--resume" in res.output and "--force" in res.output and len(res.output.strip().splitlines()) == 1
    res = runner.invoke(app, args + ["--revisions", "step-1,step-3", "--out", str(part), "--resume"])
    assert res.exit_code == 2 and "--revisions is ['step-1', 'step-3'] here but ['step-1', 'step-2', 'step-3']" in res.output
    with monkeypatch.context() as mp:  # resumed: only the third checkpoint is loaded and scanned
        _fail_at(mp, tj, "scan_rows", 1, AssertionError("finished checkpoints are read back"))
        res = runner.invoke(app, args + ["--out", str(part), "--resume"])
    assert res.exit_code == 0, res.output
    a, b = (pd.read_csv(d / "trajectory.csv").drop(columns="scan_seconds") for d in (full, part))
    pd.testing.assert_frame_equal(a, b, check_exact=True)
    assert json.loads((part / "run.json").read_text())["complete"] is True and "Partial" not in (part / "trajectory.html").read_text()


RETRIEVAL = ["retrieval", "tiny-llama", "--lengths", "200", "--depths", "0.2,0.5,0.8", "--max-new-tokens", "4"]


def test_retrieval_interrupted_then_resumed_equals_one_run(tmp_path, monkeypatch):
    import interp.experiments.retrieval as rt
    import interp.models

    full, part = tmp_path / "full", tmp_path / "part"
    assert runner.invoke(app, RETRIEVAL + ["--out", str(full)]).exit_code == 0
    with monkeypatch.context() as mp:  # SIGTERM while the third trial decodes
        _fail_at(mp, rt, "greedy_decode", 2, Interrupted(signal.SIGTERM))
        res = runner.invoke(app, RETRIEVAL + ["--out", str(part)])
    assert res.exit_code == 143, res.output
    assert "partial: 2 of 3 trials" in res.output and "--resume" in res.output and "Traceback" not in res.output
    assert pd.read_csv(part / "retrieval_trials.csv")["depth"].tolist() == [0.2, 0.5]
    assert pd.read_csv(part / "retrieval.csv")["trials"].eq(2).all()
    with monkeypatch.context() as mp:  # without --resume: refused before the model loads
        _fail_at(mp, interp.models, "load_model", 0, AssertionError("the model must not load"))
        res = runner.invoke(app, RETRIEVAL + ["--out", str(part)])
    assert res.exit_code == 2 and "--resume" in res.output and "--force" in res.output and len(res.output.strip().splitlines()) == 1
    with monkeypatch.context() as mp:  # resumed: only the third trial is decoded
        _fail_at(mp, rt, "greedy_decode", 1, AssertionError("finished trials are read back"))
        res = runner.invoke(app, RETRIEVAL + ["--out", str(part), "--resume"])
    assert res.exit_code == 0, res.output
    pd.testing.assert_frame_equal(pd.read_csv(full / "retrieval.csv"), pd.read_csv(part / "retrieval.csv"), check_exact=True)
    a, b = (pd.read_csv(d / "retrieval_trials.csv").drop(columns="seconds") for d in (full, part))
    pd.testing.assert_frame_equal(a, b, check_exact=True)
    assert json.loads((part / "run.json").read_text())["complete"] is True


ABLATE = ["ablate", "tiny-llama", "--prompts", "3", "--tokens", "48", "--corpus", "stdlib", "--engine", "python", "--all-heads"]


def test_ablate_interrupted_then_resumed_equals_one_run(tmp_path, monkeypatch):
    import interp.engine
    import interp.models

    full, part = tmp_path / "full", tmp_path / "part"
    assert runner.invoke(app, ABLATE + ["--out", str(full)]).exit_code == 0
    with monkeypatch.context() as mp:  # Ctrl-C while the third prompt is scanned
        _fail_at(mp, interp.engine, "scan", 2, Interrupted(signal.SIGINT))
        res = runner.invoke(app, ABLATE + ["--out", str(part)])
    assert res.exit_code == 130, res.output
    assert "partial: 2 of 3 prompts" in res.output and "Traceback" not in res.output
    assert json.loads((part / "state" / "scan.json").read_text())["meta"]["partial"] == "2 of 3 prompts"
    assert (part / "band_ablation.csv").exists()
    with monkeypatch.context() as mp:  # without --resume: refused before the model loads
        _fail_at(mp, interp.models, "load_model", 0, AssertionError("the model must not load"))
        res = runner.invoke(app, ABLATE + ["--out", str(part)])
    assert res.exit_code == 2 and "--resume" in res.output and "--force" in res.output and len(res.output.strip().splitlines()) == 1
    res = runner.invoke(app, ABLATE + ["--n-remove", "4", "--out", str(part), "--resume"])
    assert res.exit_code == 2 and "--n-remove is 4 here but 6" in res.output
    with monkeypatch.context() as mp:  # resumed: only the third prompt is scanned
        _fail_at(mp, interp.engine, "scan", 1, AssertionError("finished prompts are read back"))
        res = runner.invoke(app, ABLATE + ["--out", str(part), "--resume"])
    assert res.exit_code == 0, res.output
    for name in ("band_ablation.csv", "heads.csv"):
        pd.testing.assert_frame_equal(pd.read_csv(full / name), pd.read_csv(part / name), check_exact=True)
    assert json.loads((part / "run.json").read_text())["complete"] is True


def test_ablate_cut_during_the_causal_ablation_keeps_the_scan(tmp_path, monkeypatch):
    import interp.experiments.ablation as ab

    args, out = ABLATE[:3] + ["2"] + ABLATE[4:] + ["--causal", "--n-remove", "2"], tmp_path / "c"
    with monkeypatch.context() as mp:
        _fail_at(mp, ab, "causal_ablation", 0, Interrupted(signal.SIGINT))
        res = runner.invoke(app, args + ["--out", str(out)])
    assert res.exit_code == 130 and "causal ablation was cut off" in res.output, res.output
    assert "partial" not in json.loads((out / "state" / "scan.json").read_text())["meta"]
    assert (out / "band_ablation.csv").exists() and not (out / "causal_ablation.csv").exists()
    res = runner.invoke(app, args + ["--out", str(out), "--resume"])
    assert res.exit_code == 0 and (out / "causal_ablation.csv").exists(), res.output


ATLAS = ["atlas", "tiny-llama", "--prompts", "2", "--tokens", "40", "--block-size", "8", "--engine", "python", "--support",
         "5", "--effects", "zero", "--effects-prompts", "1", "--effects-tokens", "16"]


def test_atlas_interrupted_then_resumed_equals_one_run(tmp_path, monkeypatch):
    import interp.engine
    import interp.models

    full, part = tmp_path / "full", tmp_path / "part"
    res = runner.invoke(app, ATLAS + ["--out", str(full)])
    assert res.exit_code == 0, res.output
    with monkeypatch.context() as mp:  # Ctrl-C in the repeated-random pass's first prompt
        _fail_at(mp, interp.engine, "scan", 2, Interrupted(signal.SIGINT))
        res = runner.invoke(app, ATLAS + ["--out", str(part)])
    assert res.exit_code == 130, res.output
    assert "partial: 2 of " in res.output and "--resume" in res.output and "Traceback" not in res.output
    assert not (part / "atlas.csv").exists() and "Partial run: atlas stopped" in (part / "report.html").read_text()
    pd.testing.assert_frame_equal(pd.read_csv(full / "heads.csv"), pd.read_csv(part / "heads.csv"), check_exact=True)
    with monkeypatch.context() as mp:  # without --resume: refused before the model loads
        _fail_at(mp, interp.models, "load_model", 0, AssertionError("the model must not load"))
        res = runner.invoke(app, ATLAS + ["--out", str(part)])
    assert res.exit_code == 2 and "--resume" in res.output and "--force" in res.output and len(res.output.strip().splitlines()) == 1
    with monkeypatch.context() as mp:  # resumed: only the repeated-random prompts are scanned
        _fail_at(mp, interp.engine, "scan", 2, AssertionError("the text pass is read back"))
        res = runner.invoke(app, ATLAS + ["--out", str(part), "--resume"])
    assert res.exit_code == 0, res.output
    pd.testing.assert_frame_equal(pd.read_csv(full / "atlas.csv"), pd.read_csv(part / "atlas.csv"), check_exact=True)
    assert "Partial run" not in (part / "report.html").read_text()
    assert json.loads((part / "run.json").read_text())["complete"] is True


def test_patch_resume_refuses_a_changed_pairs_file(tmp_path, monkeypatch):
    import interp.experiments.patching as pt

    args, out = _patch_args(tmp_path), tmp_path / "o"
    with monkeypatch.context() as mp:
        _fail_at(mp, pt, "start_at", 1, Interrupted(signal.SIGINT))
        assert runner.invoke(app, args + ["--out", str(out)]).exit_code == 130
    _patch_args(tmp_path, PAIRS[:2])  # the same file name, other pairs
    res = runner.invoke(app, args + ["--out", str(out), "--resume"])
    assert res.exit_code == 2 and "--pairs is" in res.output and "(sha256 " in res.output, res.output


def test_scan_signal_after_a_units_rename_counts_that_unit(tmp_path, monkeypatch):
    """SIGINT between a unit's rename and its read-back (where the subprocess test's poll lands): the unit is on
    disk, so the partial tables count it, as --resume would."""
    from interp.engine import ScanResult

    orig, calls = ScanResult.load.__func__, {"n": 0}

    def load(cls, path, *a, **kw):
        calls["n"] += 1
        if calls["n"] == 2:  # the second prompt's read-back, once
            raise Interrupted(signal.SIGINT)
        return orig(cls, path, *a, **kw)

    monkeypatch.setattr(ScanResult, "load", classmethod(load))
    out = tmp_path / "race"
    res = runner.invoke(app, SCAN + ["--out", str(out)])
    assert res.exit_code == 130 and "partial: 2 of 3 prompts" in res.output, res.output
    assert len(RunDir(out, "scan", {}).finished()) == 2


@pytest.mark.parametrize("command", ["effects", "patch"])
def test_signal_after_a_layer_units_rename_counts_that_layer(tmp_path, monkeypatch, command):
    """SIGTERM right after layer 0's unit file is renamed into place: the partial table holds layer 0."""
    import interp.io

    orig, calls = interp.io.write_arrays_atomic, {"n": 0}

    def write(*a, **kw):
        out = orig(*a, **kw)
        calls["n"] += 1
        if calls["n"] == 1:
            raise Interrupted(signal.SIGTERM)
        return out

    monkeypatch.setattr(interp.io, "write_arrays_atomic", write)
    args = EFFECTS if command == "effects" else _patch_args(tmp_path)
    res = runner.invoke(app, args + ["--out", str(tmp_path / "o")])
    assert res.exit_code == 143 and "partial: 1 of 2 layers" in res.output, res.output
    table = pd.read_csv(tmp_path / "o" / f"{command}.csv")
    assert set(table["layer"]) == {0}
