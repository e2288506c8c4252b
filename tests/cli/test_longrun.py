"""Long runs (issue 46): finished units kept in OUT, --resume equal to an uninterrupted run, a partial OUT refused
without --resume / --force, Ctrl-C / SIGTERM writing partial tables marked partial with exit 130 / 143. One harness
(``CASES``) runs that shape for every command that keeps units; the tests after it cover what is particular to one."""

import importlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

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
EFFECTS = ["effects", "tiny-llama", "--prompts", "3", "--tokens", "24", "--window", "8", "--bootstrap", "50"]
SWEEP = ["sweep", "tiny-llama", "--lengths", "16,32", "--prompts", "2", "--corpus", "stdlib", "--cluster-points", "20"]
RETRIEVAL = ["retrieval", "tiny-llama", "--lengths", "200", "--depths", "0.2,0.5,0.8", "--max-new-tokens", "4"]
ABLATE = ["ablate", "tiny-llama", "--prompts", "3", "--tokens", "48", "--corpus", "stdlib", "--engine", "python", "--all-heads"]
ATLAS = ["atlas", "tiny-llama", "--prompts", "2", "--tokens", "40", "--block-size", "8", "--engine", "python", "--support",
         "5", "--effects", "zero", "--effects-prompts", "1", "--effects-tokens", "16"]


def _fail_at(monkeypatch, module, name: str, k: int, exc: BaseException):
    """Replace ``module.name`` by a wrapper that raises ``exc`` on its call number ``k + 1`` (the first k run)."""
    orig, calls = getattr(module, name), {"n": 0}

    def wrapped(*a, **kw):
        calls["n"] += 1
        if calls["n"] > k:
            raise exc
        return orig(*a, **kw)

    monkeypatch.setattr(module, name, wrapped)

@dataclass
class Case:
    """One command's interrupt / resume shape for ``test_interrupted_then_resumed_equals_one_run``.

    Attributes:
        args: the command line (without --out), given the folder of shared inputs (pairs file, checkpoints).
        target: ``"module:function"`` called once or more per unit of work; the stop is raised in its call ``stop(n) + 1``
            (``n``: its calls in an uninterrupted run), and a resumed run may call it only ``n - stop(n)`` times.
        signum: the signal the stop stands for (exit code 128 + signum).
        line: what follows ``partial:`` in the output.
        marker: ``(JSON file, key path, value)``: the metadata's ``partial`` field after the stop, gone after --resume.
        banner: ``(HTML file, text)`` of the partial banner (gone after --resume), or None.
        changed: ``(extra args, message)``: a setting other than the run's, refused on --resume naming it.
        tables: table -> columns left out of the comparison with the uninterrupted run (timings).
        check: ``check(part, full)``: what the partial tables hold.
        full: the key of the uninterrupted run (cases of one command with the same args share it).
    """

    args: Callable[[Path], list]
    target: str
    stop: Callable[[int], int]
    signum: int
    line: str
    marker: tuple
    banner: tuple | None
    changed: tuple
    tables: dict
    check: Callable[[Path, Path], None] = lambda part, full: None
    full: str = ""


def _csv(d: Path, name: str) -> pd.DataFrame:
    return pd.read_csv(d / name)


def _scan_partial(part, full):
    assert len(_csv(part, "heads.csv")) == 2 * 4  # tiny-llama: 2 layers x 4 heads


def _sweep_partial(part, full):
    assert set(_csv(part, "sweep.csv")["length"]) == {16}
    assert RunDir(part, "sweep", {}).finished() == ["length-000016-prompt-00000", "length-000016-prompt-00001",
                                                   "length-000032-prompt-00000"]


def _retrieval_partial(part, full):
    assert _csv(part, "retrieval_trials.csv")["depth"].tolist() == [0.2, 0.5]
    assert _csv(part, "retrieval.csv")["trials"].eq(2).all()


def _trajectory_partial(part, full):
    assert _csv(part, "trajectory.csv")["revision"].unique().tolist() == ["step-1", "step-2"]


def _ablate_partial(part, full):
    assert len(_csv(part, "band_ablation.csv")) == 2 * 4


def _senders_partial(part):
    paths = _csv(part, "paths.csv")
    assert set(zip(paths["sender_layer"], paths["sender_head"])) == {(0, 0)}


def _atlas_text_only(part, full):
    assert not (part / "atlas.csv").exists()
    pd.testing.assert_frame_equal(_csv(full, "heads.csv"), _csv(part, "heads.csv"), check_exact=True)


def _atlas_from_finished(part, full):
    """The text pass whole, one repeated-random prompt: atlas.csv holds every head, the text pass's columns exact."""
    heads, atlas = _csv(full, "heads.csv"), _csv(part, "atlas.csv")
    pd.testing.assert_frame_equal(heads, atlas[list(heads.columns)], check_exact=True)
    assert len(atlas) == 2 * 4 and atlas["rr_induction_score"].notna().all() and "dnll_zero" not in atlas
    assert "dnll_zero" in _csv(full, "atlas.csv")  # the effects pass's columns come with the whole run


def _layers(table: str):
    def check(part, full):
        assert set(_csv(part, table)["layer"]) == {0}
    return check


STATE = ("state/scan.json", ("meta", "partial"))
ATLAS_STOP = "atlas stopped: text pass 2 of 2 prompts; repeated-random pass "
CASES = {
    "scan": Case(lambda d: SCAN, "interp.engine:scan", lambda n: n - 1, signal.SIGINT, "2 of 3 prompts",
                 (*STATE, "2 of 3 prompts"), ("report.html", "Partial run: 2 of 3 prompts"),
                 (["--seed", "1"], "--seed is 1 here but 0"), {"heads.csv": ()}, _scan_partial),
    "effects": Case(lambda d: EFFECTS, "interp.experiments.effects:token_stats", lambda n: n // 2, signal.SIGTERM,
                    "1 of 2 layers", ("effects.json", ("partial",), "1 of 2 layers"),
                    ("effects.html", "Partial run: 1 of 2 layers"), (["--bootstrap", "60"], "--bootstrap is 60 here but 50"),
                    {"effects.csv": ()}, _layers("effects.csv")),
    "patch": Case(lambda d: _patch_args(d), "interp.experiments.patching:start_at", lambda n: n // 2, signal.SIGINT,
                  "1 of 2 layers", ("patch.json", ("partial",), "1 of 2 layers"), ("patch.html", "Partial run: 1 of 2 layers"),
                  (["--direction", "noise"], "--direction is 'noise' here but 'denoise'"), {"patch.csv": ()},
                  _layers("patch.csv")),
    "sweep": Case(lambda d: SWEEP, "interp.engine:scan", lambda n: n - 1, signal.SIGINT, "1 of 2 lengths",
                  ("sweep.json", ("partial",), "1 of 2 lengths"), ("sweep.html", "Partial run: 1 of 2 lengths"),
                  (["--lengths", "16,24"], "--lengths is [16, 24] here but [16, 32]"), {"sweep.csv": ()}, _sweep_partial),
    "trajectory": Case(lambda d: ["trajectory", str(d / "ckpt"), "--prompts", "2", "--tokens", "16", "--engine", "python"],
                       "interp.experiments.trajectory:scan_rows", lambda n: n - 1, signal.SIGINT, "2 of 3 checkpoints",
                       ("trajectory.json", ("partial",), "2 of 3 checkpoints"),
                       ("trajectory.html", "Partial run: 2 of 3 checkpoints"),
                       (["--revisions", "step-1,step-3"], "--revisions is ['step-1', 'step-3'] here but ['step-1', 'step-2', 'step-3']"),
                       {"trajectory.csv": ("scan_seconds",)}, _trajectory_partial),
    "retrieval": Case(lambda d: RETRIEVAL, "interp.experiments.retrieval:greedy_decode", lambda n: n - 1, signal.SIGTERM,
                      "2 of 3 trials", ("retrieval.json", ("partial",), "2 of 3 trials"), None,
                      (["--seed", "1"], "--seed is 1 here but 0"),
                      {"retrieval.csv": (), "retrieval_trials.csv": ("seconds",)}, _retrieval_partial),
    "ablate": Case(lambda d: ABLATE, "interp.engine:scan", lambda n: n - 1, signal.SIGINT, "2 of 3 prompts",
                   (*STATE, "2 of 3 prompts"), ("report.html", "Partial run: 2 of 3 prompts"),
                   (["--n-remove", "4"], "--n-remove is 4 here but 6"), {"band_ablation.csv": (), "heads.csv": ()},
                   _ablate_partial),
    "patch-paths": Case(lambda d: _patch_args(d) + ["--paths", "0:0,0:1"], "interp.experiments.path_patching:sender_inputs",
                        lambda n: n // 2, signal.SIGTERM, "1 of 2 senders", ("patch.json", ("partial",), "1 of 2 senders"),
                        ("patch.html", "Partial run: 1 of 2 senders"), (["--paths", "0:0"], "--paths is '0:0' here but '0:0,0:1'"),
                        {"paths.csv": ()}, lambda part, full: _senders_partial(part)),
    # tiny-llama's atlas: 2 text and 2 repeated-random prompts (interp.engine.scan each), 2 effects layers: 6 units
    "atlas-in-rr-pass": Case(lambda d: ATLAS, "interp.engine:scan", lambda n: n // 2, signal.SIGINT, "2 of 6 units",
                             (*STATE, ATLAS_STOP + "0 of 2 prompts; no atlas.csv"),
                             ("report.html", "Partial run: atlas stopped"), (["--seed", "1"], "--seed is 1 here but 0"),
                             {"atlas.csv": ()}, _atlas_text_only, full="atlas"),
    "atlas-after-an-rr-prompt": Case(lambda d: ATLAS, "interp.engine:scan", lambda n: n - 1, signal.SIGTERM, "3 of 6 units",
                                     (*STATE, ATLAS_STOP + "1 of 2 prompts; atlas.csv from these, without the later "
                                      "passes' columns"), ("report.html", "Partial run: atlas stopped"),
                                     (["--repeats", "3"], "--repeats is 3 here but 2"), {"atlas.csv": ()},
                                     _atlas_from_finished, full="atlas"),
}


def _counting(monkeypatch, module, name: str) -> dict:
    """Count the calls of ``module.name`` (into the returned dict's ``"n"``)."""
    orig, calls = getattr(module, name), {"n": 0}

    def wrapped(*a, **kw):
        calls["n"] += 1
        return orig(*a, **kw)

    monkeypatch.setattr(module, name, wrapped)
    return calls


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    """The inputs some commands read: the pairs file of ``patch``, the checkpoints of ``trajectory``."""
    d = tmp_path_factory.mktemp("inputs")
    _patch_args(d)
    _checkpoints(d / "ckpt")
    return d


@pytest.fixture(scope="module")
def full_runs(inputs, tmp_path_factory):
    """``full(name) -> (OUT of the uninterrupted run, calls of the case's target)``, each run once per module."""
    done: dict = {}

    def full(name: str):
        case = CASES[name]
        key = case.full or name
        if key not in done:
            out = tmp_path_factory.mktemp(f"full-{key}")
            mod, fn = case.target.split(":")
            with pytest.MonkeyPatch.context() as mp:
                calls = _counting(mp, importlib.import_module(mod), fn)
                res = runner.invoke(app, case.args(inputs) + ["--out", str(out)])
            assert res.exit_code == 0, res.output
            done[key] = out, calls["n"]
        return done[key]

    return full


def _field(d: Path, marker: tuple):
    data = json.loads((d / marker[0]).read_text())
    for k in marker[1][:-1]:
        data = data[k]
    return data.get(marker[1][-1])


@pytest.mark.parametrize("name", list(CASES))
def test_interrupted_then_resumed_equals_one_run(name, inputs, full_runs, tmp_path, monkeypatch):
    """The stop: exit 128 + signal, the partial line, tables and marks; a partial OUT refused without --resume before
    the model loads, and with other settings; --resume does only the unfinished units and writes the uninterrupted
    run's tables exactly, unmarked, and marks the run complete."""
    import interp.models

    case, args, part = CASES[name], CASES[name].args(inputs), tmp_path / "part"
    full, n = full_runs(name)
    mod, fn = case.target.split(":")
    module, k = importlib.import_module(mod), case.stop(n)
    assert 0 < k < n
    with monkeypatch.context() as mp:
        _fail_at(mp, module, fn, k, Interrupted(case.signum))
        res = runner.invoke(app, args + ["--out", str(part)])
    assert res.exit_code == 128 + case.signum, res.output
    assert f"partial: {case.line}" in res.output and "--resume" in res.output and "Traceback" not in res.output
    assert _field(part, case.marker) == case.marker[2]
    if case.banner:
        assert case.banner[1] in (part / case.banner[0]).read_text()
    case.check(part, full)
    with monkeypatch.context() as mp:  # without --resume: refused before the model loads
        _fail_at(mp, interp.models, "load_model", 0, AssertionError("the model must not load"))
        res = runner.invoke(app, args + ["--out", str(part)])
    assert res.exit_code == 2 and "--resume" in res.output and "--force" in res.output and len(res.output.strip().splitlines()) == 1
    res = runner.invoke(app, args + case.changed[0] + ["--out", str(part), "--resume"])
    assert res.exit_code == 2 and case.changed[1] in res.output, res.output
    with monkeypatch.context() as mp:  # resumed: the finished units are read back, only the others run
        _fail_at(mp, module, fn, n - k, AssertionError("finished units are read back"))
        res = runner.invoke(app, args + ["--out", str(part), "--resume"])
    assert res.exit_code == 0, res.output
    for table, drop in case.tables.items():
        a, b = (_csv(d, table).drop(columns=list(drop)) for d in (full, part))
        pd.testing.assert_frame_equal(a, b, check_exact=True)
    assert _field(part, case.marker) is None
    if case.banner:
        assert "Partial run" not in (part / case.banner[0]).read_text()
    assert json.loads((part / "run.json").read_text())["complete"] is True


@pytest.mark.parametrize("command", ["effects", "patch"])
def test_resume_needs_the_exact_method(command, inputs, tmp_path):
    args = EFFECTS if command == "effects" else _patch_args(inputs)
    res = runner.invoke(app, args + ["--method", "naive", "--out", str(tmp_path / "o"), "--resume"])
    assert res.exit_code == 2 and "--method exact" in res.output, res.output


def test_sweep_signal_at_a_lengths_last_read_back_keeps_that_length(tmp_path, monkeypatch):
    """SIGINT between the rename and the read-back of a length's last unit: that length is whole on disk, so the
    partial sweep keeps it (and stops before the next length)."""
    from interp.engine import ScanResult

    orig, calls = ScanResult.load.__func__, {"n": 0}

    def load(cls, path, *a, **kw):
        calls["n"] += 1
        if calls["n"] == 2:  # length 16's second prompt's read-back
            raise Interrupted(signal.SIGINT)
        return orig(cls, path, *a, **kw)

    monkeypatch.setattr(ScanResult, "load", classmethod(load))
    res = runner.invoke(app, SWEEP + ["--out", str(tmp_path / "o")])
    assert res.exit_code == 130 and "partial: 1 of 2 lengths" in res.output, res.output
    assert set(_csv(tmp_path / "o", "sweep.csv")["length"]) == {16}
    assert len(RunDir(tmp_path / "o", "sweep", {}).finished()) == 2


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


def _checkpoints(root: Path, steps=(1, 2, 3)) -> Path:
    import torch

    from interp.lab import LabConfig, LabForCausalLM, Vocab, save_lab

    vocab = Vocab([f"t{i}" for i in range(20)])
    for step in steps:
        torch.manual_seed(step)
        save_lab(LabForCausalLM(LabConfig(vocab_size=20, n_layers=1, n_heads=2, d_model=16, d_mlp=32, max_positions=64)),
                 vocab, root / f"step-{step}")
    return root


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


@pytest.mark.parametrize("command", ["effects", "patch", "paths"])
def test_signal_after_a_layer_units_rename_counts_that_layer(tmp_path, monkeypatch, command):
    """SIGTERM right after layer 0's (``--paths``: sender 0:0's) unit file is renamed into place: the partial table
    holds layer 0 (sender 0:0)."""
    import interp.io

    orig, calls = interp.io.write_arrays_atomic, {"n": 0}

    def write(*a, **kw):
        out = orig(*a, **kw)
        calls["n"] += 1
        if calls["n"] == 1:
            raise Interrupted(signal.SIGTERM)
        return out

    monkeypatch.setattr(interp.io, "write_arrays_atomic", write)
    if command == "paths":
        res = runner.invoke(app, _patch_args(tmp_path) + ["--paths", "0:0,0:1", "--out", str(tmp_path / "o")])
        assert res.exit_code == 143 and "partial: 1 of 2 senders" in res.output, res.output
        _senders_partial(tmp_path / "o")
        return
    args = EFFECTS if command == "effects" else _patch_args(tmp_path)
    res = runner.invoke(app, args + ["--out", str(tmp_path / "o")])
    assert res.exit_code == 143 and "partial: 1 of 2 layers" in res.output, res.output
    table = pd.read_csv(tmp_path / "o" / f"{command}.csv")
    assert set(table["layer"]) == {0}


@pytest.mark.parametrize("name", ["retrieval", "trajectory"])
def test_signal_at_a_pickled_units_read_back_counts_that_unit(name, inputs, tmp_path, monkeypatch):
    """SIGINT / SIGTERM between the rename and the read-back of the second trial's / checkpoint's unit
    (``interp.experiments.units.keep_units``): the unit is on disk, so the partial tables count it, as --resume would."""
    case, orig, calls = CASES[name], pd.read_pickle, {"n": 0}

    def read(path, *a, **kw):
        if Path(path).parent.name == "units":
            calls["n"] += 1
            if calls["n"] == 2:
                raise Interrupted(case.signum)
        return orig(path, *a, **kw)

    monkeypatch.setattr(pd, "read_pickle", read)
    out = tmp_path / "o"
    res = runner.invoke(app, case.args(inputs) + ["--out", str(out)])
    assert res.exit_code == 128 + case.signum and "partial: 2 of 3 " in res.output, res.output
    assert len(RunDir(out, name, {}).finished()) == 2
    case.check(out, None)


def test_ablate_causal_resumes_its_finished_bands(tmp_path, monkeypatch):
    """SIGTERM in the causal ablation's second band: the first band is kept as a unit; --resume reads it back, runs
    only the other bands, and the causal tables equal an uninterrupted run's."""
    import interp.experiments.ablation as ab

    args = ABLATE[:3] + ["2"] + ABLATE[4:] + ["--causal"]
    full, part = tmp_path / "full", tmp_path / "part"
    calls = _counting(monkeypatch, ab, "rope_intervention")
    assert runner.invoke(app, args + ["--out", str(full)]).exit_code == 0
    n = calls["n"]  # one per band
    assert n == 3
    with monkeypatch.context() as mp:
        _fail_at(mp, ab, "rope_intervention", 1, Interrupted(signal.SIGTERM))
        res = runner.invoke(app, args + ["--out", str(part)])
    assert res.exit_code == 143 and "cut off after 1 of 3 bands" in res.output, res.output
    assert [u for u in RunDir(part, "ablate", {}).finished() if u.startswith("causal-")] == ["causal-band-00.pkl"]
    assert not (part / "causal_ablation.csv").exists()
    with monkeypatch.context() as mp:
        _fail_at(mp, ab, "rope_intervention", n - 1, AssertionError("the finished band is read back"))
        res = runner.invoke(app, args + ["--out", str(part), "--resume"])
    assert res.exit_code == 0, res.output
    for table in ("causal_ablation.csv", "causal_heads.csv", "band_ablation.csv"):
        pd.testing.assert_frame_equal(_csv(full, table), _csv(part, table), check_exact=True)
