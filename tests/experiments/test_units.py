"""interp.experiments.units: the unit-keeping loop of long runs (issue 46), off any model."""

from pathlib import Path

import pytest

from interp.experiments.units import keep_units, read_pickle, write_pickle
from interp.errors import CorruptStateError


class Stop(BaseException):
    pass


def _compute(log: list):
    def compute(todo):
        for name in todo:
            log.append(name)
            yield name, {"name": name}
    return compute


def test_finished_units_read_back_a_damaged_one_redone(tmp_path):
    names = ["a.pkl", "b.pkl", "c.pkl"]
    write_pickle(tmp_path / "a.pkl", {"name": "a.pkl"})
    (tmp_path / "b.pkl").write_bytes(b"not a pickle")
    log: list = []
    got, stopped = keep_units(tmp_path, names, _compute(log), read_pickle, write_pickle)
    assert stopped is None and log == ["b.pkl", "c.pkl"]
    assert got == {n: {"name": n} for n in names} and read_pickle(tmp_path / "b.pkl") == {"name": "b.pkl"}
    with pytest.raises(CorruptStateError, match="cannot be read"):
        read_pickle(tmp_path / "missing.pkl")


def test_a_stop_after_the_rename_counts_the_unit_and_no_folder_keeps_nothing(tmp_path):
    calls = {"n": 0}

    def load(path: Path):
        calls["n"] += 1
        if calls["n"] == 2:  # the second unit's read-back
            raise Stop()
        return read_pickle(path)

    got, stopped = keep_units(tmp_path, ["a", "b", "c"], _compute([]), load, write_pickle, stop_on=(Stop,))
    assert isinstance(stopped, Stop) and list(got) == ["a", "b"] and sorted(p.name for p in tmp_path.iterdir()) == ["a", "b"]
    got, stopped = keep_units(None, ["x", "y"], _compute([]), read_pickle, write_pickle)
    assert got == {"x": {"name": "x"}, "y": {"name": "y"}} and stopped is None
