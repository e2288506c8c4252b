"""``interp atlas`` as a user runs it: its files and fixed column names on a tiny model offline; bad input is one line,
exit 2, before any model loads."""

import pandas as pd
from typer.testing import CliRunner

from interp.cli import app
from tests.cli.test_paths import interp, refused

runner = CliRunner()


def test_atlas_writes_its_files(tmp_path):
    out = tmp_path / "atlas"
    res = runner.invoke(app, ["atlas", "tiny-llama", "--prompts", "2", "--tokens", "40", "--ablate", "--n-remove", "2",
                              "--block-size", "8", "--out", str(out)])
    assert res.exit_code == 0, res.output
    t = pd.read_csv(out / "atlas.csv")
    fixed = ["prev_token_score", "duplicate_token_score", "induction_score", "rr_prev_token_score", "rr_duplicate_token_score",
             "rr_induction_score", "rr_echo_score"]
    assert list(t.columns[:3]) == ["layer", "head", "kv_head"] and set(fixed) <= set(t.columns) and len(t) == 8
    assert t[fixed].notna().all().all() and {"role", "roles", "slash_score_wo_high"} <= set(t.columns)
    for name in ("atlas.html", "atlas_roles.csv", "atlas_cooccurrence.csv", "heads.csv", "report.html"):
        assert (out / name).exists(), name
    assert "roles:" in res.output and "repeated-random" in res.output


def test_bad_input_is_one_line(tmp_path):
    refused(interp("atlas", "tiny-llama", "--corpus", "random", "--out", str(tmp_path / "a")), "--corpus", "pydoc or stdlib")
    refused(interp("atlas", "tiny-llama", "--retrieval", "--depths", "2", "--out", str(tmp_path / "a")), "--depths")
    (tmp_path / "f").write_text("x")
    refused(interp("atlas", "tiny-llama", "--out", str(tmp_path / "f")), str(tmp_path / "f"))
    assert not (tmp_path / "a").exists()
    res = runner.invoke(app, ["atlas", "no-such-model", "--out", str(tmp_path / "a")])
    assert res.exit_code == 2 and "no-such-model" in res.output and len(res.output.strip().splitlines()) == 1, res.output
