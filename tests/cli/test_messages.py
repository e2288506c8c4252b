"""Issue 23, a new user's first hour: install commands in full, messages that name the real problem, honest
progress lines, compare's default names and page width, the sweep page's axes, atomic writes."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from interp.cli import app
from interp.io import write_atomic
from interp.models import ZOO
from interp.report.bundle import write_csv
from interp.report.compare import render_compare, compare_table
from interp.report.sweep_page import render_sweep, sweep_data
from interp.engine import ScanConfig, ScanResult
from interp.engine import scan as interp_scan
from interp.experiments.sweep import sweep
from tests.conftest import random_tokens

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


def test_models_prints_install_commands_in_full_at_60_columns():
    """Rich must not read '.[gemma]' as markup, nor cut a command with an ellipsis, however narrow the terminal."""
    prelude = ("import interp.models.zoo as m\nm.is_installed = lambda name: name.startswith('tiny')\n"
               "from interp.cli import app\napp(['models'], prog_name='interp')\n")
    env = {**os.environ, "COLUMNS": "60", "PYTHONPATH": str(ROOT)}
    res = subprocess.run([sys.executable, "-c", prelude], capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stderr
    commands = {e.source.install for e in ZOO.values() if e.source is not None and not e.name.startswith("tiny")}
    assert commands and any("[" in c for c in commands)  # e.g. pip install -e '.[gemma]'
    lines = res.stdout.splitlines()
    for c in commands:
        assert any(line.rstrip().endswith(c) for line in lines), (c, res.stdout)
    assert "…" not in res.stdout and "..." not in res.stdout


def test_one_prompt_is_singular_and_the_summary_gives_wall_time(tmp_path):
    res = runner.invoke(app, ["scan", "tiny-llama", "--prompts", "1", "--tokens", "32", "--out", str(tmp_path / "s")])
    assert res.exit_code == 0, res.output
    assert "1 prompt x 32 tokens" in res.output and "1 prompts" not in res.output
    assert re.search(r"total [0-9.]+ s wall", res.output)


def test_lengths_get_their_own_message():
    res = runner.invoke(app, ["sweep", "tiny-llama", "--lengths", "512,abc"])
    assert res.exit_code == 2
    assert "--lengths takes comma-separated integers (e.g. 512,1024,2048), got '512,abc'" in res.output
    assert "'all'" not in res.output and "0,4,8" not in res.output


def test_long_min_frac_default_is_readable():
    res = runner.invoke(app, ["scan", "--help"], terminal_width=200)
    assert "2/3" in res.output and "0.6666" not in res.output


def test_merge_refusal_names_the_folders(tmp_path):
    s0 = tmp_path / "s0"
    res = runner.invoke(app, ["scan", "tiny-llama", "--prompts", "2", "--tokens", "32", "--shard", "0/2", "--out", str(s0)])
    assert res.exit_code == 0, res.output
    shutil.copytree(s0, tmp_path / "s0copy")
    res = runner.invoke(app, ["merge", str(s0), str(tmp_path / "s0copy"), "--out", str(tmp_path / "m")], terminal_width=400)
    assert res.exit_code == 2 and "?" not in res.output, res.output
    assert f"in both {s0} (shard 0/2) and {tmp_path / 's0copy'} (shard 0/2)" in res.output
    assert not (tmp_path / "m").exists()


def test_compare_defaults_to_distinct_folder_names_and_fits_the_page(tmp_path):
    for d in ("a", "b"):
        res = runner.invoke(app, ["scan", "tiny-llama", "--prompts", "1", "--tokens", "32", "--out", str(tmp_path / d / "scan")])
        assert res.exit_code == 0, res.output
    out = tmp_path / "cmp"
    res = runner.invoke(app, ["compare", str(tmp_path / "a" / "scan"), str(tmp_path / "b" / "scan"), "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert sorted(pd.read_csv(out / "compare.csv")["model"].unique()) == ["a/scan", "b/scan"]
    page = (out / "compare.html").read_text()
    assert '<h2>Summary</h2><div class="wide"><table' in page and ".wide{max-width:100%;overflow-x:auto}" in page
    widths = [int(w) for w in re.findall(r'\\?"width\\?":\s*(\d+)', page)]
    assert all(w <= 1200 for w in widths), widths  # no figure wider than the page's 1200 px box
    assert page.count('\\"orientation\\":\\"h\\"') + page.count('"orientation":"h"') >= 2  # legends in rows above the plots


def test_compare_table_names_the_fix():
    r = ScanResult.__new__(ScanResult)
    with pytest.raises(ValueError, match="--names"):
        compare_table([r, r], ["x", "x"])


def test_sweep_progress_lines_and_page_axes(tiny_llama, capsys):
    prompts = [random_tokens(64, seed=s) for s in range(2)]
    res = sweep(tiny_llama, prompts, [32, 64], ScanConfig(geometry=True, cluster_points=20), progress=True)
    err = capsys.readouterr().err
    assert "length 32 (1 of 2): 2 prompts" in err and "length 64 (2 of 2)" in err
    assert re.search(r"length 64: scanned in [0-9.]+ s, finalised in [0-9.]+ s", err)
    assert set(res.seconds) == {32, 64} and all(t["scan"] > 0 and t["finalise"] >= 0 for t in res.seconds.values())
    data = sweep_data(res.table)
    assert all(len(p) == 3 and p[1] for p in data["panels"])  # [title, y-axis title, columns]
    page = render_sweep(res)
    assert "yaxis:{title:{text:p[1]}}" in page and "tickvals:L,ticktext:L.map(String)" in page and "range:[lo-pad,hi+pad]" in page
    assert "(dotted line)" not in page  # tiny-llama's context (512) is outside 32..64: no line, the axis spans the lengths


def test_an_interrupted_write_leaves_no_half_written_table(tmp_path, monkeypatch):
    target = tmp_path / "heads.csv"
    target.write_text("old,complete\n1,2\n")
    real = pd.DataFrame.to_csv

    def half_then_interrupt(self, path, *args, **kwargs):
        Path(path).write_text("layer,hea")  # part of the table, then Ctrl-C
        raise KeyboardInterrupt

    monkeypatch.setattr(pd.DataFrame, "to_csv", half_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        write_csv(pd.DataFrame({"layer": [0], "head": [1]}), target)
    assert target.read_text() == "old,complete\n1,2\n" and sorted(p.name for p in tmp_path.iterdir()) == ["heads.csv"]
    monkeypatch.setattr(pd.DataFrame, "to_csv", real)
    write_csv(pd.DataFrame({"layer": [0], "head": [1]}), target)
    assert target.read_text() == "layer,head\n0,1\n"
    with pytest.raises(OSError):
        write_atomic(tmp_path / "new.html", lambda tmp: (tmp.write_text("<html"), (_ for _ in ()).throw(OSError("disk full"))))
    assert not (tmp_path / "new.html").exists() and sorted(p.name for p in tmp_path.iterdir()) == ["heads.csv"]


def test_progress_bars_reach_n_of_n(tiny_llama, capsys):
    """The scan's bar ends at N/N: ``zip(ids, tqdm(toks))`` stopped before the bar counted the last prompt (1/2, 0/1)."""
    from interp.engine import scan

    for n in (1, 3):
        scan(tiny_llama, [random_tokens(16, seed=s) for s in range(n)], progress=True)
        bar = capsys.readouterr().err.replace("\r", "\n").strip().splitlines()[-1]
        assert f"{n}/{n}" in bar, bar


def test_heads_is_computed_once(tiny_llama, monkeypatch):
    """``ScanResult.heads`` builds the table once (it recomputed every measure's columns on each access), and a
    caller's edit of the returned copy does not leak into the next access."""
    import interp.engine.result as result_mod
    from interp.engine import scan

    res = scan(tiny_llama, [random_tokens(16)])
    calls = []
    real = result_mod.head_table
    monkeypatch.setattr(result_mod, "head_table", lambda r: calls.append(1) or real(r))
    first = res.heads
    first.loc[0, "slash_score"] = -1.0
    again = res.heads
    assert len(calls) == 1 and again.loc[0, "slash_score"] != -1.0


def test_import_interp_loads_nothing_heavy():
    """``import interp`` (and ``interp --help``'s module) import neither torch's heavy users nor the report stack:
    transformers, scikit-learn, plotly and Ray load on first use (``import interp`` took 5.7 s)."""
    code = ("import sys, interp, interp.cli\n"
            "print(sorted(m for m in ('transformers', 'sklearn', 'plotly', 'ray', 'transformer_lens') if m in sys.modules))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "[]", res.stdout


def test_a_refused_compare_leaves_no_output_folder(tmp_path):
    """Same --names for two scans: exit 2 naming --names, and no (empty) output folder left behind. (tests/cli/test_paths.py'
    'nothing is written' cases refuse before any input is read, so they pass on code that made the folder first.)"""
    for d in ("a", "b"):
        res = runner.invoke(app, ["scan", "tiny-llama", "--prompts", "1", "--tokens", "32", "--out", str(tmp_path / d)])
        assert res.exit_code == 0, res.output
    out = tmp_path / "cmp"
    res = runner.invoke(app, ["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--names", "x,x", "--out", str(out)])
    assert res.exit_code == 2 and "--names" in res.output, res.output
    assert not out.exists()


def test_prompts_too_short_for_long_lags_say_so_and_name_the_length(tmp_path):
    """Issue 49: at 64 tokens no long lag fits (500..5000 need 1504-token prompts); long_slash.csv and
    content_repeats.csv are written with their header only, and the closing summary and the report say why."""
    out = tmp_path / "s"
    res = runner.invoke(app, ["scan", "tiny-llama", "--prompts", "2", "--tokens", "64", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert ("long range: no long lag measured: lags 500..5000 need 1000 entries per prompt past the first 4 positions, so "
            "prompts of at least 1504 tokens, and these have 64; long_slash.csv and content_repeats.csv have only their "
            "header (--tokens 1504 or more fills them)") in " ".join(res.output.split())
    for name in ("long_slash.csv", "content_repeats.csv"):
        assert (out / name).read_text().count("\n") == 1  # the header
    page = (out / "report.html").read_text()
    assert "Long-range slash-dominant heads: not measured" in page and "<code>--tokens 1504</code> or more" in page


def test_the_shortest_prompt_with_a_long_lag_has_one(tiny_llama):
    from interp.measures.slash import long_min_tokens, no_long_lags

    cfg = ScanConfig(long_lags=(20, 60), long_min_entries=20, map_size=8)
    assert long_min_tokens(cfg) == 44 and long_min_tokens(ScanConfig()) == 1504
    short = interp_scan(tiny_llama, [random_tokens(43, seed=0)], cfg)
    assert "prompts of at least 44 tokens, and these have 43" in no_long_lags(short) and not short.long_lag_range()
    fits = interp_scan(tiny_llama, [random_tokens(44, seed=0)], cfg)
    assert no_long_lags(fits) == "" and fits.long_lag_range() == range(20, 21)


def test_every_options_help_is_shown_whole():
    """Issue 49 (6): each option's help text appears in full in ``--help`` (rich markup ate '[default: ...]' text in
    brackets, and '%%' was printed as typed), so no sentence breaks off; checked for every option of every command."""
    import typer.main

    for name, command in typer.main.get_command(app).commands.items():
        res = runner.invoke(app, [name, "--help"], env={"COLUMNS": "1000"})  # one line per option: no interleaved columns
        assert res.exit_code == 0, res.output
        shown = "".join(re.sub(r"[│╭╮╰╯─]", " ", res.output).split())  # white space dropped: wrapped lines join
        assert "%%" not in shown, name
        for p in command.params:
            if getattr(p, "help", None):
                assert "".join(p.help.split()) in shown, (name, p.name, p.help)


def test_every_command_has_a_one_line_summary():
    """``interp --help`` lists each command with its docstring's first paragraph (typer's rule): that paragraph is a
    summary of at most two lines, the details after a blank line (they show in ``interp COMMAND --help``)."""
    import inspect

    import typer

    for name, command in typer.main.get_command(app).commands.items():
        first = inspect.cleandoc(command.help or "").split("\n\n")[0].replace("\n", " ")
        assert 20 <= len(first) <= 160, (name, len(first), first)
