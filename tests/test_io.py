"""Atomic writes (``interp.io.write_atomic``): an interrupted write leaves the previous complete file (or none) and no
temporary file, for the writer itself, a scan's saved state, the ``heads.csv`` of the scan/report path and a sweep's
table. Each interruption writes part of the new content first, so a plain open-and-write would leave a half file."""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import pandas as pd
import pytest
import torch

import interp.io
from interp.engine import ScanResult
from interp.experiments.sweep import SweepResult
from interp.io import write_atomic, write_text_atomic
from interp.measures.state import State
from interp.report.bundle import write_outputs

OLD = Path(__file__).resolve().parent / "fixtures" / "state_v0_1_0_tiny_llama"


def _files(d: Path) -> list[str]:
    """Every file under ``d``, relative, sorted (temporary files would show as ``.NAME.<id>.tmp.SUFFIX``)."""
    return sorted(str(p.relative_to(d)) for p in d.rglob("*") if p.is_file())


def _interrupting(real_text: str):
    """A writer that writes the first half of ``real_text`` to its target, then raises KeyboardInterrupt (Ctrl-C)."""
    def write(path, *args, **kwargs):
        Path(path).write_text(real_text[: len(real_text) // 2])
        raise KeyboardInterrupt
    return write


@pytest.fixture
def result():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the 0.1.0 fixture lacks sink_rate: a warning when its head table is built
        r = ScanResult.load(OLD)
        r.heads
    return r


def test_interrupted_writer_or_rename_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    target = tmp_path / "report.html"
    write_text_atomic(target, "<html>complete</html>")
    with pytest.raises(KeyboardInterrupt):
        write_atomic(target, _interrupting("<html>new and longer</html>"))
    assert target.read_text() == "<html>complete</html>" and _files(tmp_path) == ["report.html"]

    def refuse(src, dst):  # the rename fails (e.g. the folder turned read-only): the finished temp file goes too
        raise OSError("rename refused")

    monkeypatch.setattr(interp.io.os, "replace", refuse)
    with pytest.raises(OSError, match="rename refused"):
        write_text_atomic(target, "<html>new</html>")
    with pytest.raises(OSError, match="rename refused"):
        write_text_atomic(tmp_path / "fresh.csv", "a,b\n")
    assert target.read_text() == "<html>complete</html>" and _files(tmp_path) == ["report.html"]


def test_interrupted_scan_save_leaves_the_previous_state(tmp_path, monkeypatch, result):
    d = result.save(tmp_path / "state")
    before = {n: (d / n).read_bytes() for n in ("state.pt", "scan.json")}
    first = ScanResult.load(d).state
    changed = State({k: v * 2 + 1 for k, v in result.state.items()})
    real = State.save

    def half_then_interrupt(self, path):  # the real bytes of the new state, cut in half, then Ctrl-C
        real(self, path)
        data = Path(path).read_bytes()
        Path(path).write_bytes(data[: len(data) // 2])
        raise KeyboardInterrupt

    monkeypatch.setattr(State, "save", half_then_interrupt)
    result.state = changed
    with pytest.raises(KeyboardInterrupt):
        result.save(d)
    assert {n: (d / n).read_bytes() for n in before} == before and _files(tmp_path) == ["state/scan.json", "state/state.pt"]
    monkeypatch.setattr(State, "save", real)
    back = ScanResult.load(d)  # the previous complete state, not the interrupted one
    assert back.state.keys() == first.keys() and all(torch.equal(back.state[k], first[k]) for k in first)


def test_interrupted_heads_csv_of_the_scan_output_keeps_the_previous_table(tmp_path, monkeypatch, result):
    """``interp scan --out`` / ``interp report`` write heads.csv through ``interp.report.bundle.write_outputs``."""
    out = tmp_path / "out"
    out.mkdir()
    shutil.copy(OLD / "heads.csv", out / "heads.csv")  # the previous run's complete table
    before = (out / "heads.csv").read_bytes()
    new_text = result.heads.to_csv(index=False)
    monkeypatch.setattr(pd.DataFrame, "to_csv", lambda self, path, *a, **k: _interrupting(new_text)(path))
    with pytest.raises(KeyboardInterrupt):
        write_outputs(result, out)  # state/ first, then heads.csv: interrupted there
    assert (out / "heads.csv").read_bytes() == before
    assert _files(out) == ["heads.csv", "state/scan.json", "state/state.pt"]


def test_interrupted_sweep_table_leaves_none(tmp_path, monkeypatch, result):
    sw = SweepResult({16: result})
    text = sw.table.to_csv(index=False)
    monkeypatch.setattr(pd.DataFrame, "to_csv", lambda self, path, *a, **k: _interrupting(text)(path))
    with pytest.raises(KeyboardInterrupt):
        sw.save(tmp_path)  # sweep.json, which marks a complete sweep, is never written
    assert _files(tmp_path) == ["length_16/scan.json", "length_16/state.pt"]
    with pytest.raises(FileNotFoundError, match="no sweep.json"):
        SweepResult.load(tmp_path)


def test_atomic_writes_fsync_the_content_before_the_rename_and_the_folder_after(tmp_path, monkeypatch):
    """The order a power loss needs: the temporary file's data on disk, then the rename, then the folder's entry."""
    events = []
    real_fsync, real_replace = interp.io.os.fsync, interp.io.os.replace
    monkeypatch.setattr(interp.io.os, "fsync", lambda fd: (events.append(("fsync", Path(f"/proc/self/fd/{fd}").resolve().name)),
                                                          real_fsync(fd)))
    monkeypatch.setattr(interp.io.os, "replace", lambda a, b: (events.append(("replace", Path(b).name)), real_replace(a, b)))
    write_text_atomic(tmp_path / "t.csv", "a,b\n")
    assert events[0][0] == "fsync" and events[0][1].startswith(".t.") and events[1] == ("replace", "t.csv")
    assert events[2] == ("fsync", tmp_path.name)
    events.clear()
    interp.io.write_dir_atomic(tmp_path / "unit", lambda d: (d / "x.pt").write_bytes(b"1"))
    names = [n for kind, n in events if kind == "fsync"]
    assert names[0] == "x.pt" and names[1].startswith(".unit.") and events[-2] == ("replace", "unit") and names[-1] == tmp_path.name
