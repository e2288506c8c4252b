"""Issue 49 (5): what needs no weights is checked before the model loads. Counts and lengths at once (typer's ranges),
head grids and context lengths from the model's configuration alone (a tiny model's config, ``config.json``, the GGUF
header of a zoo model): each refusal is exit 2, one line, and the loader is never called (it raises here)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

import interp.models
import interp.models.loaders
from interp.cli import app
from interp.models.grid import ModelShape, _from_gguf_header, converted_folder, model_shape
from interp.models.zoo import ZOO, is_installed

runner = CliRunner()


@pytest.fixture
def no_load(monkeypatch):
    """Any call of the model loader fails the test."""
    def refuse(*a, **k):
        raise AssertionError("the model loaded before the refusal")

    monkeypatch.setattr(interp.models, "load_model", refuse)
    monkeypatch.setattr(interp.models.loaders, "load_model", refuse)


def refused(args: list[str], *needles: str) -> str:
    res = runner.invoke(app, args, prog_name="interp")
    line = res.output.strip()
    assert res.exit_code == 2, (args, res.output, res.exception)
    assert len(line.splitlines()) == 1 and line.startswith("error:"), line
    for n in needles:
        assert n in line, (n, line)
    return line


@pytest.mark.parametrize("args,needles", [
    (["scan", "tiny-llama", "--tokens", "0"], ["--tokens", "greater than or equal to 2"]),
    (["scan", "tiny-llama", "--prompts", "0"], ["--prompts"]),
    (["scan", "tiny-llama", "--prompts", "abc"], ["--prompts", "integer", "interp scan --help"]),
    (["scan", "tiny-llama", "--tokens", "600"], ["--tokens 600 exceeds the context of tiny-llama (512)", "--tokens 512 or fewer"]),
    (["scan", "tiny-llama", "--corpus", "wiki"], ["unknown --corpus 'wiki'", "pydoc"]),
    (["scan", "tiny-llama", "--corpus", "repeated-random", "--tokens", "16", "--repeats", "20"], ["--repeats 20"]),
    (["scan", "tiny-llama", "--prompts", "100000000"], ["ask for fewer prompts"]),
    (["scan", "tiny-llama", "--device", "tpu"], ["tpu"]),
    (["scan", "tiny-llama", "--device", "a\x1eb\nc"], ["unknown device", "a\\x1eb\\nc"]),  # torch echoes it: still one line
    (["scan", "tiny-llama", "--executor", "dask"], ["unknown --executor 'dask'"]),
    (["scan", "tiny-llama", "--tokens", "64", "--shard", "0/2", "--executor", "ray"], ["--shard and --executor ray"]),
    (["scan", "tiny-nope"], ["unknown model 'tiny-nope'"]),
    (["effects", "tiny-llama", "--heads", "99:0"], ["head 99:0 is outside the model's grid: layers 0..1, heads 0..3"]),
    (["effects", "tiny-llama", "--tokens", "1"], ["--tokens"]),
    (["patch", "tiny-llama", "--task", "induction", "--heads", "0:9"], ["head 0:9 is outside"]),
    (["patch", "tiny-llama", "--task", "induction", "--paths", "5:0"], ["head 5:0 is outside"]),
    (["atlas", "tiny-llama", "--corpus", "random"], ["--corpus random is not a text corpus"]),
    (["atlas", "tiny-llama", "--tokens", "16", "--repeats", "16"], ["--repeats 16"]),
    (["atlas", "tiny-llama", "--tokens", "64", "--retrieval", "--lengths", "1024"], ["--lengths", "512"]),
    (["ablate", "tiny-llama", "--tokens", "64", "--layers", "7"], ["--layers: layer 7 is outside tiny-llama's 2 layers"]),
    (["ablate", "tiny-llama", "--tokens", "64", "--variant", "pi:x"], ["pi:x"]),
    (["sweep", "tiny-llama", "--lengths", "64,1024"], ["--lengths: 1024 exceeds the context of tiny-llama (512)", "--beyond-context"]),
    (["sweep", "tiny-llama", "--lengths", "1"], ["lengths must be integers >= 2"]),
    (["retrieval", "tiny-llama", "--lengths", "500"], ["plus 50 generated tokens exceed the model's context (512)"]),
    (["view", "tiny-llama", "--text", "a", "--layers", "0-1000000000"], ["--layers: layer 1000000000 is out of range"]),
    (["view", "tiny-llama", "--text", "a", "--heads", "3-1"], ["--heads takes"]),
    (["view", "tiny-llama"], ["exactly one of --text and --file"]),
    (["verify", "tiny-llama", "--tokens", "9999"], ["--tokens 9999 exceeds the context"]),
])
def test_refused_before_the_model_loads(no_load, tmp_path, args, needles):
    refused([*args, *(["--out", str(tmp_path / "out")] if args[0] != "verify" else [])], *needles)
    assert not (tmp_path / "out").exists()


def test_trajectory_tokens_beyond_a_checkpoints_context(no_load, tmp_path):
    """A checkpoint folder's context comes from its config.json (the lab's ``max_positions``), before any scan."""
    (tmp_path / "run" / "step-1").mkdir(parents=True)
    (tmp_path / "run" / "step-1" / "config.json").write_text(json.dumps({"n_layers": 1, "n_heads": 2, "max_positions": 64}))
    refused(["trajectory", str(tmp_path / "run"), "--tokens", "100", "--out", str(tmp_path / "out")],
            "--tokens 100 exceeds the context", "(64)")


ZOO_GGUF = [n for n, e in ZOO.items() if e.source is not None]


@pytest.mark.parametrize("name", ZOO_GGUF)
def test_zoo_models_are_checked_from_their_configuration(no_load, tmp_path, name):
    """An installed zoo model: the grid and context from its converted config.json or GGUF header; the same refusals."""
    if not is_installed(name):
        pytest.skip(f"{name} is not installed")
    shape = model_shape(name)
    assert shape is not None and shape.context_length
    refused(["effects", name, "--heads", f"{shape.n_layers}:0", "--out", str(tmp_path / "o")], "outside the model's grid",
            f"layers 0..{shape.n_layers - 1}, heads 0..{shape.n_heads - 1}")
    refused(["scan", name, "--tokens", str(shape.context_length + 1), "--out", str(tmp_path / "o")],
            f"exceeds the context of {name} ({shape.context_length})")


@pytest.mark.parametrize("name", ZOO_GGUF)
def test_gguf_header_gives_what_the_converted_config_says(name):
    """The header reader (keys only, no tensor) agrees with the config.json that the first load wrote."""
    if not is_installed(name):
        pytest.skip(f"{name} is not installed")
    from_header = _from_gguf_header(ZOO[name].source.chunks()[0])
    assert from_header is not None and from_header.source.startswith("GGUF header of ")
    folder = converted_folder(name)
    if not (folder / "config.json").is_file():
        pytest.skip(f"{name} was never loaded here (no converted config.json to compare with)")
    c = json.loads((folder / "config.json").read_text())
    c = c.get("text_config", c)
    assert (from_header.n_layers, from_header.n_heads, from_header.context_length) == (
        c["num_hidden_layers"], c["num_attention_heads"], c["max_position_embeddings"])


def test_model_shape_sources(tmp_path):
    assert model_shape("tiny-llama") == ModelShape(2, 4, 512, "tiny config")
    (tmp_path / "config.json").write_text(json.dumps({"text_config": {"num_hidden_layers": 3, "num_attention_heads": 5}}))
    assert model_shape(f"local:{tmp_path}") == ModelShape(3, 5, None, str(tmp_path / "config.json"))
    assert model_shape("local:/nonexistent") is None and model_shape("some-org/not-in-the-cache") is None
    assert model_shape("gpt-7") is None


def test_usage_errors_are_one_line(no_load):
    """click's own errors (unknown option, missing argument, unknown command) are one line too, naming --help."""
    assert "see interp scan --help" in refused(["scan", "--bogus"], "No such option: --bogus")
    refused(["compare"], "Missing argument")
    refused(["nosuch"], "No such command")
