"""The command line as a user runs it (typer's runner, tiny model)."""

import pandas as pd
from typer.testing import CliRunner

from interp.cli import app

runner = CliRunner()


def test_models_lists_zoo():
    res = runner.invoke(app, ["models"])
    assert res.exit_code == 0 and "smollm2-135m" in res.output and "tiny-gemma3" in res.output


def test_scan_writes_outputs_and_errors_are_clear(tmp_path):
    out = tmp_path / "scan"
    res = runner.invoke(app, ["scan", "tiny-llama", "--prompts", "2", "--tokens", "64", "--out", str(out), "--ood"])
    assert res.exit_code == 0, res.output
    heads = pd.read_csv(out / "heads.csv")
    assert len(heads) == 2 * 4 and {"layer", "head", "kv_head", "slash_score", "ood_ratio"} <= set(heads.columns)
    assert (out / "report.html").stat().st_size > 1_000_000
    bad = runner.invoke(app, ["scan", "gpt-7", "--out", str(tmp_path / "x")])
    assert bad.exit_code == 2 and "valid names" in bad.output and "Traceback" not in bad.output
    long = runner.invoke(app, ["scan", "tiny-llama", "--tokens", "100000", "--out", str(tmp_path / "y")])
    assert long.exit_code == 2 and "context" in long.output


def test_shards_then_merge_equal_one_pass(tmp_path):
    args = ["scan", "tiny-qwen2", "--prompts", "3", "--tokens", "48", "--corpus", "stdlib"]
    assert runner.invoke(app, args + ["--out", str(tmp_path / "all")]).exit_code == 0
    for i in range(2):
        assert runner.invoke(app, args + ["--shard", f"{i}/2", "--out", str(tmp_path / f"s{i}")]).exit_code == 0
    res = runner.invoke(app, ["merge", str(tmp_path / "s0"), str(tmp_path / "s1"), "--out", str(tmp_path / "m")])
    assert res.exit_code == 0, res.output
    a, b = pd.read_csv(tmp_path / "all" / "heads.csv"), pd.read_csv(tmp_path / "m" / "heads.csv")
    pd.testing.assert_frame_equal(a, b, atol=1e-6)
    assert runner.invoke(app, ["scan", "tiny-qwen2", "--shard", "2/2"]).exit_code == 2


def test_bad_long_min_frac_is_one_line(tmp_path):
    res = runner.invoke(app, ["scan", "tiny-llama", "--prompts", "1", "--tokens", "32", "--long-min-frac", "1.5", "--out", str(tmp_path)])
    assert res.exit_code == 2 and "long_min_frac must lie in (0, 1]" in res.output and "Traceback" not in res.output


def test_ablate_writes_the_band_table_and_the_causal_summary(tmp_path):
    out = tmp_path / "abl"
    res = runner.invoke(app, ["ablate", "tiny-llama", "--prompts", "2", "--tokens", "48", "--out", str(out), "--causal",
                              "--n-remove", "2", "--planes", "1,2", "--all-heads", "--variant", "rope-id"])
    assert res.exit_code == 0, res.output
    t = pd.read_csv(out / "band_ablation.csv")
    assert {"layer", "head", "delta", "original", "wo_high", "wo_medium", "wo_low", "custom"} <= set(t.columns)
    assert len(t) == 2 * 4  # tiny-llama: 2 layers x 4 heads, --all-heads
    c = pd.read_csv(out / "causal_ablation.csv")
    assert list(c.columns) == ["band", "layers", "nll_original", "nll", "delta_nll"] and list(c["band"]) == ["wo_high", "wo_medium", "wo_low", "custom", "rope_id"]
    assert (c["layers"] == "all").all()
    page = (out / "report.html").read_text()
    assert "Frequencies: band ablation" in page and "Causal ablation" in page
    bad = runner.invoke(app, ["ablate", "tiny-llama", "--tokens", "48", "--planes", "0,99", "--out", str(tmp_path / "bad")])
    assert bad.exit_code == 2 and "planes of 'custom' must lie in" in bad.output


def test_load_and_state_errors_are_one_line_with_exit_code_2(tmp_path, monkeypatch):
    """Every bad input of issue 11 gives one line naming the problem and the fix, exit code 2, no traceback."""
    import torch

    def one_line(args, *expected):
        res = runner.invoke(app, args)
        text = res.output.strip()
        assert res.exit_code == 2, res.output
        assert "Traceback" not in text and text.startswith("error:") and "\n" not in text, res.output
        for e in expected:
            assert e in text, (e, res.output)

    (tmp_path / "empty").mkdir()
    one_line(["scan", f"local:{tmp_path / 'empty'}"], "has no config.json", "local:PATH")
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "config.json").write_text("{ not json")
    one_line(["scan", f"local:{tmp_path / 'broken'}"], "config.json cannot be read")
    one_line(["verify", "tiny-llama", "--device", "cuda" if not torch.cuda.is_available() else "tpu"], "device")
    one_line(["scan", "tiny-llama", "--dtype", "float8"], "float32, bfloat16 or float16")
    out = tmp_path / "scan"
    assert runner.invoke(app, ["scan", "tiny-llama", "--prompts", "1", "--tokens", "32", "--out", str(out)]).exit_code == 0
    state = out / "state" / "state.pt"
    state.write_bytes(state.read_bytes()[:100])
    one_line(["report", str(out)], "state.pt cannot be read", "re-run the scan")
    torch.save({"weights": torch.zeros(3)}, state)
    one_line(["report", str(out)], "is not the state of a scan")
    (out / "state" / "scan.json").write_text("[]")
    one_line(["report", str(out)], "scan.json is not a scan's settings")
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    one_line(["scan", "gemma-3-270m"], "pip install -e '.[gemma]'")


def test_view_writes_an_offline_page(tmp_path):
    out = tmp_path / "view.html"
    res = runner.invoke(app, ["view", "tiny-llama", "--text", "a <b> & c", "--layers", "1", "--out", str(out)])
    assert res.exit_code == 0, res.output
    page = out.read_text()
    assert 'title="position 3">&lt;</span>' in page and "<script src=" not in page  # byte tokens: "<" is token 3
    bad = runner.invoke(app, ["view", "tiny-llama", "--out", str(out)])
    assert bad.exit_code == 2 and bad.output.startswith("error:")


def test_measure_list_and_switch(tmp_path):
    res = runner.invoke(app, ["scan", "--measure", "list"])
    assert res.exit_code == 0 and "token_match" in res.output and "--measure inp" in res.output
    res = runner.invoke(app, ["scan", "tiny-llama", "--measure", "nope", "--out", str(tmp_path / "x")])
    assert res.exit_code == 2 and "unknown measure 'nope'" in res.output and not (tmp_path / "x").exists()
    res = runner.invoke(app, ["scan", "tiny-llama", "--corpus", "repeated-random", "--prompts", "2", "--tokens", "40",
                              "--measure", "token_match", "--out", str(tmp_path / "s")])
    assert res.exit_code == 0, res.output
    heads = pd.read_csv(tmp_path / "s" / "heads.csv")
    assert heads["induction_score"].notna().all() and "inp_active_abs" not in heads


def test_ablate_takes_the_engine_flag(tmp_path):
    """`interp ablate --engine python` and the default engine give the same band ablation table (float rounding)."""
    import pandas as pd

    tables = []
    for engine in ("python", "auto"):
        out = tmp_path / engine
        res = runner.invoke(app, ["ablate", "tiny-llama", "--prompts", "2", "--tokens", "40", "--n-remove", "2", "--all-heads",
                                  "--engine", engine, "--out", str(out)])
        assert res.exit_code == 0, res.output
        tables.append(pd.read_csv(out / "band_ablation.csv").sort_values(["layer", "head"]).reset_index(drop=True))
    pd.testing.assert_frame_equal(tables[0], tables[1], atol=1e-6)
    res = runner.invoke(app, ["ablate", "tiny-llama", "--engine", "warp", "--out", str(tmp_path / "x")])
    assert res.exit_code == 2 and "warp" in res.output and not (tmp_path / "x").exists()


def test_full_profile_and_exact_counterfactual_flags(tmp_path):
    """--full-profile scores every lag (same heads.csv), --counterfactual-queries 0 the exact pre-RoPE sink weight
    (equal to the default's at 80 tokens, below its 256 rows); a negative row count is refused in one line."""
    args = ["scan", "tiny-llama", "--prompts", "2", "--tokens", "80"]
    assert runner.invoke(app, args + ["--out", str(tmp_path / "d")]).exit_code == 0
    res = runner.invoke(app, args + ["--full-profile", "--counterfactual-queries", "0", "--out", str(tmp_path / "f")])
    assert res.exit_code == 0, res.output
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "d" / "heads.csv"), pd.read_csv(tmp_path / "f" / "heads.csv"), rtol=1e-6)
    bad = runner.invoke(app, args + ["--counterfactual-queries", "-1", "--out", str(tmp_path / "b")])
    assert bad.exit_code == 2 and "counterfactual-queries" in bad.output
