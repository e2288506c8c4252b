"""``interp kvsplit`` as a user runs it: DuoAttention's two files on a tiny model (the TSV round-trips through
``numpy.loadtxt`` with one row per layer and one column per kv head; a 0.5 threshold gives the chosen split); bad
input is one line, exit 2, before the model loads."""

import json

import numpy as np
import pandas as pd
from typer.testing import CliRunner

from interp.cli import app
from interp.models import load_model
from tests.cli.test_paths import interp, refused

runner = CliRunner()


def test_kvsplit_writes_duo_attention_files(tmp_path):
    out = tmp_path / "split"
    res = runner.invoke(app, ["kvsplit", "tiny-llama", "--order", "kvpress", "--streaming-share", "0.75", "--sink", "4",
                              "--window", "16", "--prompts", "2", "--tokens", "64", "--out", str(out)])
    assert res.exit_code == 0, res.output
    card = load_model("tiny-llama").card
    s = np.loadtxt(out / "full_attention_heads.tsv", delimiter="\t", ndmin=2)
    assert s.shape == (card.n_layers, card.n_kv_heads)
    assert s.min() >= 0 and s.max() <= 1
    n = s.size
    assert int((s < 0.5).sum()) == round(0.75 * n)  # the streamed share reads back from the file alone
    assert json.loads((out / "config.json").read_text())["sink_size"] == 4
    assert json.loads((out / "config.json").read_text())["recent_size"] == 16
    table = pd.read_csv(out / "kvsplit.csv")
    # the exported score keeps the raw order: the streamed heads are exactly those of lowest kvpress score
    lowest = set(table.nsmallest(round(0.75 * n), "raw_score")[["layer", "kv_head"]].itertuples(index=False, name=None))
    assert lowest == set(table[table["streamed"]][["layer", "kv_head"]].itertuples(index=False, name=None))
    assert np.allclose(table.sort_values(["layer", "kv_head"])["score"].to_numpy(), s.ravel(), atol=1e-6)
    patterns = json.loads((out / "patterns.json").read_text())
    assert len(patterns) == card.n_layers * card.n_heads
    assert {p["pattern"] for p in patterns} <= {"stream_llm", "vertical_and_slash"}


def test_bad_input_is_one_line(tmp_path):
    for args, needle in [(["--order", "magic"], "unknown --order"),
                         (["--streaming-share", "1.5"], "--streaming-share must lie in [0, 1]"),
                         (["--window", "0"], "--window >= 1"),
                         (["--order", "effects"], "--order effects needs --effects")]:
        refused(interp("kvsplit", "tiny-llama", *args, "--out", str(tmp_path / "k")), needle)
    refused(interp("kvsplit", "tiny-llama", "--order", "effects", "--effects", str(tmp_path / "none.csv"),
                   "--out", str(tmp_path / "k")), "none.csv")
    assert not (tmp_path / "k").exists()
