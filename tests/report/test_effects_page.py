"""Issue 49 (6): the effects page draws the model's whole grid with the heads not run visibly absent (grey, "not run"),
describes only the interventions run, warns below 5 prompts; the command's closing line names every file it wrote."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
from typer.testing import CliRunner

from interp.cli import app
from interp.report.effects_page import MIN_PROMPTS, NOT_RUN, describe_interventions, effect_grid

runner = CliRunner()


def _table(cells: list[tuple[int, int]], intervention: str = "zero") -> pd.DataFrame:
    return pd.DataFrame([{"layer": l, "head": h, "intervention": intervention, "dnll": 0.01 * (k + 1), "dnll_lo": 0.0,
                          "dnll_hi": 0.1, "kl": 0.02} for k, (l, h) in enumerate(cells)])


def test_the_grid_is_the_models_whole_grid_with_not_run_cells_grey():
    run = [(1, 2), (0, 1)]
    fig = effect_grid(_table(run), "zero", grid=(3, 5))  # the model: 3 layers x 5 heads; two heads run
    values, absent = (np.array(t.z, dtype=float) for t in fig.data)
    assert values.shape == absent.shape == (3, 5)  # not the 2 x 3 of the largest layer and head asked for
    ran = np.zeros((3, 5), bool)
    ran[tuple(zip(*run))] = True
    assert np.isfinite(values[ran]).all() and np.isnan(values[~ran]).all()
    assert np.isfinite(absent[~ran]).all() and np.isnan(absent[ran]).all()  # grey exactly where no head ran
    assert fig.data[1].colorscale[0][1] == NOT_RUN == fig.data[1].colorscale[-1][1] and not fig.data[1].showscale
    assert NOT_RUN.lower() not in ("#ffffff", "white")  # the dnll scale's zero is white: not-run must differ
    assert fig.data[1].text[2][4] == "<b>L2H4</b> not run (not in --heads)" and fig.data[1].text[1][2] == ""
    assert "(grey: 13 of 15 heads not run)" in fig.layout.title.text


def test_a_full_grid_has_no_not_run_layer():
    cells = [(l, h) for l in range(2) for h in range(3)]
    fig = effect_grid(_table(cells), "zero", grid=(2, 3))
    assert len(fig.data) == 1 and "not run" not in fig.layout.title.text


def test_the_header_describes_only_the_interventions_run():
    text = describe_interventions(["zero", "rope_high"], {"sink": 4, "window": 64, "n_remove": 6})
    assert text.startswith("zero: the head's output set to 0; rope_high: 6 planes of the band")
    assert "streaming" not in text and "mean" not in text
    assert "keys 0..3 and the last 64 keys" in describe_interventions(["streaming"], {"sink": 4, "window": 64})


def test_the_command_draws_the_whole_grid_warns_and_lists_every_file(tmp_path):
    out = tmp_path / "e"
    res = runner.invoke(app, ["effects", "tiny-llama", "--prompts", "2", "--tokens", "16", "--heads", "1:2",
                              "--interventions", "zero", "--bootstrap", "20", "--out", str(out)], terminal_width=400)
    assert res.exit_code == 0, res.output
    last = res.output.strip().splitlines()[-1]
    named = set(re.findall(r"(\S+?)[,;)]?(?=\s|$)", last.split("wrote ", 1)[1]))
    on_disk = {str(p) for p in out.iterdir()}
    assert on_disk <= {n.rstrip("/") for n in named}, (on_disk, last)  # every file and folder in OUT is named
    assert {f"{out}/effects.csv", f"{out}/effects.json", f"{out}/effects.html"} <= on_disk
    assert f"use --prompts {MIN_PROMPTS} or more" in res.output and "rest on 2 prompts" in res.output
    page = (out / "effects.html").read_text()
    assert "(grey: 7 of 8 heads not run)" in page  # tiny-llama: 2 layers x 4 heads, one run
    assert "zero: the head&#x27;s output set to 0." in page and "streaming" not in page.split("<h2>")[0]
    assert f"fewer than {MIN_PROMPTS} give intervals too coarse" in page
