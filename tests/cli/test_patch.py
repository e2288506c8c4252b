"""``interp patch`` as a user runs it (typer's runner, tiny models): the tables and page it writes for each mode, and
every bad input as one line and exit 2 before the model loads."""

import json

import pandas as pd
import pytest
from typer.testing import CliRunner

import interp.models as models
import interp.models.loaders as loaders
from interp.cli import app
from interp.experiments.path_patching import PATH_COLUMNS
from interp.experiments.patching import COLUMNS, POS_COLUMNS

runner = CliRunner()
GOOD = [{"clean": "abcdef", "corrupt": "abqdef", "answer": "x", "wrong": "y"},
        {"clean": "zbcdeg", "corrupt": "zbkdeg", "answer": "u", "wrong": "w"},
        {"clean": "hbcdeh", "corrupt": "hbcpeh", "answer": "x", "wrong": "u"}]


def _file(tmp_path, lines, name="pairs.jsonl"):
    p = tmp_path / name
    p.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n")
    return p


def _run(*args):
    return runner.invoke(app, ["patch", "tiny-llama", "--bootstrap", "50", *map(str, args)])


def test_writes_the_table_json_and_page(tmp_path):
    res = _run("--pairs", _file(tmp_path, GOOD), "--out", tmp_path / "o")
    assert res.exit_code == 0, res.output
    t = pd.read_csv(tmp_path / "o" / "patch.csv")
    assert list(t.columns) == list(COLUMNS) and len(t) == 2 * 4 and (t["direction"] == "denoise").all()
    meta = json.loads((tmp_path / "o" / "patch.json").read_text())
    assert {"clean_ld", "corrupt_ld", "clean_accuracy", "corrupt_accuracy", "seconds", "config", "model"} <= set(meta)
    assert meta["pairs"] == 3 and meta["source"].endswith("pairs.jsonl") and meta["method"] == "exact"
    assert "L1H3" in (tmp_path / "o" / "patch.html").read_text() and "clean LD" in res.output


def test_each_position_noise_attribution_and_hover(tmp_path):
    atlas = tmp_path / "atlas.csv"
    pd.DataFrame({"layer": [0, 1], "head": [1, 2], "roles": ["sdh;sink", ""]}).to_csv(atlas, index=False)
    effects = tmp_path / "effects.csv"
    pd.DataFrame({"layer": [0], "head": [1], "intervention": ["zero"], "dnll": [0.5]}).to_csv(effects, index=False)
    res = _run("--pairs", _file(tmp_path, GOOD), "--positions", "each", "--direction", "noise", "--out", tmp_path / "e")
    assert res.exit_code == 0, res.output
    t = pd.read_csv(tmp_path / "e" / "patch.csv")
    assert list(t.columns) == list(POS_COLUMNS) and len(t) == 8 * 7 and (t["direction"] == "noise").all()
    res = _run("--pairs", _file(tmp_path, GOOD), "--method", "attribution", "--atlas", atlas, "--effects", effects,
               "--out", tmp_path / "a")
    assert res.exit_code == 0, res.output
    assert json.loads((tmp_path / "a" / "patch.json").read_text())["method"] == "attribution"
    page = (tmp_path / "a" / "patch.html").read_text()
    assert "roles: sdh;sink" in page and "effects (dnll): zero 0.5" in page


def test_paths_and_a_task(tmp_path):
    res = _run("--task", "induction", "--n-pairs", "3", "--paths", "0:1,0:2", "--heads", "1:0,1:1", "--out", tmp_path / "p")
    assert res.exit_code == 0, res.output
    t = pd.read_csv(tmp_path / "p" / "paths.csv")
    assert list(t.columns) == list(PATH_COLUMNS) and len(t) == 2 * 2 * 3 and set(t["via"]) == {"q", "k", "v"}
    assert not (tmp_path / "p" / "patch.csv").exists()
    assert json.loads((tmp_path / "p" / "patch.json").read_text())["source"] == "task:induction"


@pytest.mark.parametrize("lines,args,message", [
    ([GOOD[0], {"clean": "a", "corrupt": "b", "answer": "x"}], [], "pairs.jsonl line 2: missing key wrong"),
    ([GOOD[0], GOOD[1], {**GOOD[2], "corrupt": "hbcdehh"}], [], "pairs.jsonl line 3: clean and corrupt prompts have "
                                                                "different token lengths (7 and 8)"),
    ([{**GOOD[0], "answer": ""}], [], "pairs.jsonl line 1: answer '' is empty after tokenisation"),
    ([], [], "pairs.jsonl holds no pairs (empty file)"),
    (["{bad"], [], "pairs.jsonl line 1: not JSON"),
    ([GOOD[0], {**GOOD[1], "clean": "ab", "corrupt": "ac"}], ["--positions", "each"], "--positions each needs pairs of one "
                                                                                    "template"),
    (GOOD, ["--direction", "up"], "unknown --direction 'up'"),
    (GOOD, ["--metric", "kl"], "unknown --metric 'kl'"),
    (GOOD, ["--method", "fast"], "unknown --method 'fast'"),
    (GOOD, ["--heads", "2:0"], "head 2:0 is outside the model's grid"),
    (GOOD, ["--paths", "0:9"], "head 0:9 is outside the model's grid"),
    (GOOD, ["--paths", "all"], "--paths takes sender heads"),
    (GOOD, ["--paths", "0:1", "--method", "attribution"], "--paths runs exact path patching"),
    (GOOD, ["--task", "ioi"], "give either --pairs PAIRS.jsonl or --task"),
    (None, ["--task", "ioi"], "--task ioi needs 3 names that are one token"),
    (None, ["--task", "greater-than"], "two-digit year tokens"),
    (None, ["--task", "copy"], "unknown --task 'copy'"),
    (None, [], "give either --pairs PAIRS.jsonl or --task"),
])
def test_bad_input_is_one_line_and_exit_2_before_the_model_loads(tmp_path, monkeypatch, lines, args, message):
    def no_load(*a, **k):
        raise AssertionError("the model must not load on bad input")

    monkeypatch.setattr(loaders, "load_model", no_load)
    monkeypatch.setattr(models, "load_model", no_load)
    pairs = ["--pairs", _file(tmp_path, lines)] if lines is not None else []
    res = _run(*pairs, *args, "--out", tmp_path / "x")
    assert res.exit_code == 2, res.output
    assert message in res.output
    assert len(res.output.strip().splitlines()) == 1
    assert not (tmp_path / "x").exists()


def test_a_missing_pairs_file_is_refused(tmp_path):
    res = _run("--pairs", tmp_path / "none.jsonl", "--out", tmp_path / "x")
    assert res.exit_code == 2 and "none.jsonl" in res.output and len(res.output.strip().splitlines()) == 1
