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


def test_atlas_effects_columns_and_hover(tmp_path):
    """--effects measures every head on the text pass's first prompts and adds dnll_<name> / interval / kl_<name> to
    atlas.csv and the grid's hover; --effects-from joins a measured effects.csv instead."""
    out = tmp_path / "atlas"
    res = runner.invoke(app, ["atlas", "tiny-llama", "--prompts", "2", "--tokens", "40", "--no-inp", "--block-size", "8",
                              "--effects", "zero,streaming", "--effects-prompts", "1", "--effects-tokens", "24", "--out", str(out)])
    assert res.exit_code == 0, res.output
    t = pd.read_csv(out / "atlas.csv")
    cols = ["dnll_zero", "dnll_zero_lo", "dnll_zero_hi", "kl_zero", "dnll_streaming", "kl_streaming"]
    assert set(cols) <= set(t.columns) and t[cols].notna().all().all() and len(t) == 8
    assert (t["dnll_zero_lo"] == t["dnll_zero"]).all()  # one prompt: the interval is the point
    page = (out / "atlas.html").read_text()
    assert "What each head does: causal effects" in page and "what it does, zero: dNLL" in page
    eff = pd.DataFrame({"layer": t["layer"], "head": t["head"], "intervention": "mean", "dnll": 0.5, "dnll_lo": 0.4,
                        "dnll_hi": 0.6, "kl": 0.1})
    eff.to_csv(tmp_path / "effects.csv", index=False)
    res = runner.invoke(app, ["atlas", "tiny-llama", "--prompts", "2", "--tokens", "40", "--no-inp", "--block-size", "8",
                              "--effects-from", str(tmp_path / "effects.csv"), "--out", str(tmp_path / "b")])
    assert res.exit_code == 0, res.output
    t = pd.read_csv(tmp_path / "b" / "atlas.csv")
    assert (t["dnll_mean"] == 0.5).all() and "what it does, mean: dNLL = 0.5 [0.4, 0.6]" in (tmp_path / "b" / "atlas.html").read_text()


def test_bad_effects_options_are_one_line(tmp_path):
    a = str(tmp_path / "a")
    refused(interp("atlas", "tiny-llama", "--effects", "erase", "--out", a), "unknown intervention", "zero")
    refused(interp("atlas", "tiny-llama", "--effects", "zero", "--effects-tokens", "5000", "--out", a), "--effects-tokens")
    refused(interp("atlas", "tiny-llama", "--effects", "zero", "--effects-prompts", "0", "--out", a), "--effects-prompts")
    refused(interp("atlas", "tiny-llama", "--effects-from", str(tmp_path / "none.csv"), "--out", a), "no such file")
    refused(interp("atlas", "tiny-llama", "--effects", "zero", "--effects-from", str(tmp_path / "none.csv"), "--out", a), "one of them")
    (tmp_path / "bad.csv").write_text("layer,head\n0,0\n")
    refused(interp("atlas", "tiny-llama", "--effects-from", str(tmp_path / "bad.csv"), "--out", a), "needs the columns")
    assert not (tmp_path / "a").exists()
