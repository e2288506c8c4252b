"""``interp retrieval`` as a user runs it: the tables on a tiny model offline; bad input is one line, exit 2."""

import pandas as pd
from typer.testing import CliRunner

from interp.cli import app
from tests.cli.test_paths import interp, refused

runner = CliRunner()


def test_retrieval_writes_its_tables(tmp_path):
    out = tmp_path / "ret"
    res = runner.invoke(app, ["retrieval", "tiny-llama", "--lengths", "200", "--depths", "0.2,0.8", "--max-new-tokens", "6",
                              "--out", str(out)])
    assert res.exit_code == 0, res.output
    heads = pd.read_csv(out / "retrieval.csv")
    assert list(heads.columns) == ["layer", "head", "kv_head", "retrieval_score", "retrieval_score_all", "hits", "hits_all",
                                   "trials_retrieved", "trials"]
    assert len(heads) == 2 * 4 and (heads["trials"] == 2).all()
    summary = pd.read_csv(out / "retrieval_summary.csv")
    assert list(summary.columns) == ["length", "depth", "rouge1_recall", "retrieved", "trials"] and len(summary) == 2
    trials = pd.read_csv(out / "retrieval_trials.csv")
    assert len(trials) == 2 and {"needle_start", "needle_end", "response", "rouge1_recall", "copy_steps"} <= set(trials.columns)
    assert "Copy accuracy" in res.output and "answered none" in res.output  # a random tiny model copies nothing


def test_bad_grid_is_one_line_before_the_model_loads(tmp_path):
    for args, needle in [(["--depths", "0.5,1.5"], "--depths must be fractions"),
                         (["--depths", "half"], "--depths takes comma-separated numbers"),
                         (["--lengths", "8"], "--lengths must be token counts"),
                         (["--template", "fancy"], "--template must be one of")]:
        refused(interp("retrieval", "tiny-llama", *args, "--out", str(tmp_path / "r")), needle)
    (tmp_path / "a_file").write_text("x")
    refused(interp("retrieval", "tiny-llama", "--out", str(tmp_path / "a_file")), "a_file")
    assert not (tmp_path / "r").exists()


def test_lengths_beyond_the_context_are_refused(tmp_path):
    res = runner.invoke(app, ["retrieval", "tiny-llama", "--lengths", "500", "--out", str(tmp_path / "r")])
    assert res.exit_code == 2 and "exceed the model's context" in res.output and "Traceback" not in res.output
