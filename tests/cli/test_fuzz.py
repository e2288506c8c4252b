"""Issue 46 part 4: bad input, fuzzed. For every option of every command, Hypothesis draws bad values (negative, zero,
huge, non-numeric, malformed head lists, lengths beyond the context, unknown corpora and names, a file where a folder
is expected, a missing input) on top of arguments that are valid (the tiny model, small sizes), and requires what a
user is promised for any bad input: exit code 2, one line starting with ``error:``, no traceback, and nothing written
outside ``--out`` (the run's scratch folder is the working directory and is compared before and after). Where the
check needs no weights (every option but a few named in ``AFTER_LOAD``) the model loader must not even be called.

Kept short for CI: derandomized, a fixed number of examples per option, typer's in-process runner, and no model
load where the check comes before it. Which values are *bad* is this file's decision, option by option (``BAD``);
where any value of a type is fine (``--seed``, ``--text``), only values that do not parse are drawn.
"""

from __future__ import annotations

import os
import typing
from pathlib import Path

import pytest
import typer.main
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import interp.models
from interp.cli import app
from interp.cli.common import MAX_TOKENS

runner = CliRunner()
COMMANDS = typer.main.get_command(app).commands
OURS = ("scan", "atlas", "ablate", "sweep", "view", "merge", "compare", "report", "verify", "retrieval", "effects", "patch",
        "trajectory")  # the commands whose every option has its own bad values below; others get the type-level ones

# valid arguments per command ({d}: the scratch folder, with a scan in {d}/scan and checkpoints in {d}/ckpt); the drawn
# option is appended, so it overrides a value given here
BASE = {
    "scan": ["scan", "tiny-llama", "--prompts", "1", "--tokens", "16", "--out", "{d}/out"],
    "atlas": ["atlas", "tiny-llama", "--prompts", "1", "--tokens", "16", "--out", "{d}/out"],
    "ablate": ["ablate", "tiny-llama", "--prompts", "1", "--tokens", "16", "--out", "{d}/out"],
    "sweep": ["sweep", "tiny-llama", "--prompts", "1", "--lengths", "8,16", "--out", "{d}/out"],
    "view": ["view", "tiny-llama", "--text", "a b c", "--out", "{d}/out/view.html"],
    "merge": ["merge", "{d}/scan", "--out", "{d}/out"],
    "compare": ["compare", "{d}/scan", "{d}/scan", "--names", "a,b", "--out", "{d}/out"],
    "report": ["report"],
    "verify": ["verify", "tiny-llama", "--tokens", "16"],
    "retrieval": ["retrieval", "tiny-llama", "--lengths", "64", "--depths", "0.5", "--max-new-tokens", "4", "--out", "{d}/out"],
    "effects": ["effects", "tiny-llama", "--prompts", "2", "--tokens", "16", "--window", "4", "--bootstrap", "10", "--out", "{d}/out"],
    "patch": ["patch", "tiny-llama", "--task", "induction", "--n-pairs", "2", "--bootstrap", "10", "--out", "{d}/out"],
    "trajectory": ["trajectory", "{d}/ckpt", "--prompts", "1", "--tokens", "16", "--out", "{d}/out"],
}
HUGE = st.integers(10**6, 10**15)
EXAMPLES = int(os.environ.get("INTERP_FUZZ_EXAMPLES", "4"))  # per option; a longer hunt: INTERP_FUZZ_EXAMPLES=100


def words(*extra: str) -> st.SearchStrategy[str]:
    """Names that no option takes: drawn text (letters, digits, punctuation, a newline) and ``extra``."""
    text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",), exclude_characters="/"), min_size=1, max_size=12)
    return st.one_of(st.sampled_from(list(extra) or ["nope"]), text.filter(lambda s: s.strip() not in KNOWN_NAMES))


KNOWN_NAMES = {"pydoc", "stdlib", "random", "repeated-random", "cpu", "cuda", "auto", "float32", "bfloat16", "float16", "fp32", "bf16", "fp16",
               "triton", "cpu-kernel", "python", "local", "ray", "exact", "naive", "attribution", "zero", "mean",
               "streaming", "rope_high", "rope_medium", "rope_low", "nope", "denoise", "noise", "all", "each", "logit_diff",
               "nll", "ioi", "induction", "greater-than", "plain", "chat", "list", "inp", "geometry", "token_match", "echo",
               "massive", "shape", "heavy_hitters"}
# head lists that are malformed or outside tiny-llama's 2 x 4 grid
BAD_HEADS = st.one_of(st.sampled_from(["", ",", "99:0", "0:99", "1", "a:b", "0:1:2", "-1:0", "0:-1", "1.5:0", "0:1,,5"]),
                      st.tuples(st.integers(2, 10**9), st.integers(0, 3)).map(lambda t: f"{t[0]}:{t[1]}"))


def _is_int(s: str) -> bool:
    try:
        int(s)
        return True
    except ValueError:
        return False


BAD_INTS = st.one_of(st.sampled_from(["", ",", "a", "1,b", "1.5", "0x", "--"]), st.text(min_size=1, max_size=6)
                     .filter(lambda s: not _is_int(s) and any(not (c.isdigit() or c in ", -") for c in s)))
PATHS = {  # paths relative to the scratch folder: a file where a folder is expected, and the reverse, and missing ones
    "file": "{d}/a_file", "under_file": "{d}/a_file/sub", "folder": "{d}/a_folder", "missing": "{d}/missing/x.csv",
    "html_name": "{d}/out.html", "empty": "",
}
OUT_DIR = st.sampled_from(["file", "under_file", "html_name"]).map(PATHS.get)
IN_FILE = st.sampled_from(["folder", "missing", "under_file"]).map(PATHS.get)
IN_DIR = st.sampled_from(["file", "missing", "a_folder_without_state"]).map(lambda k: PATHS.get(k, "{d}/a_folder"))

# (command or "*", option) -> strategy of bad values; "*" holds for every command of OURS with that option
BAD: dict[tuple[str, str], st.SearchStrategy] = {
    ("*", "model"): words("gpt-7", "tiny-nope", "local:{d}/missing", "local:{d}/a_file", "local:{d}/a_folder"),
    ("*", "--corpus"): words("wiki", "PYDOC", "random "),
    ("atlas", "--corpus"): st.sampled_from(["random", "repeated-random", "wiki"]),
    ("*", "--tokens"): st.integers(513, 10**15),  # tiny-llama's context is 512
    ("*", "--prompts"): HUGE,  # more windows than the pydoc corpus holds
    ("trajectory", "--prompts"): st.integers(MAX_TOKENS // 16 + 1, 10**15),  # random prompts: more tokens than one run takes
    ("*", "--repeats"): st.integers(16, 10**9).map(str),  # more copies than 16 tokens hold (with --corpus repeated-random)
    ("*", "--measure"): words("slash2", "geometry,echo", "LIST"),
    ("*", "--out"): OUT_DIR,
    ("view", "--out"): st.sampled_from(["folder", "under_file"]).map(PATHS.get),
    ("*", "--shard"): st.sampled_from(["1/1", "2/2", "-1/2", "0/0", "a/b", "1", "0/2/3", "", "1/-2"]),
    ("*", "--long-min-frac"): st.one_of(st.floats(max_value=0), st.floats(min_value=1.0001, exclude_min=True),
                                        st.just("nan")),
    ("*", "--device"): words("gpu", "cuda:99", "tpu", "mps2"),
    ("*", "--dtype"): words("float8", "int8", "double"),
    ("*", "--engine"): words("cuda", "fast"),
    ("*", "--device-map"): words("balanced", "cpu", "{}"),
    ("*", "--executor"): words("dask", "spark", "Ray"),
    ("*", "--retries"): st.one_of(st.integers(max_value=-1), st.integers(min_value=101)),
    ("*", "--lengths"): st.one_of(BAD_INTS, st.sampled_from(["0", "1", "-5", "16,-1", "600", "8,100000"])),
    ("retrieval", "--lengths"): st.one_of(BAD_INTS, st.sampled_from(["0", "8", "-5", "64,600", "10000"])),
    ("*", "--depths"): st.one_of(st.sampled_from(["", "x", "1.5", "-0.1", "0.5,2", "nan"]), st.floats(min_value=1.01)),
    ("*", "--planes"): st.one_of(BAD_INTS, st.sampled_from(["99", "-1", "0,1000000"])),
    ("*", "--variant"): words("partial:x", "pi:abc", "rope", "yarn:x:y"),
    ("*", "--layers"): st.one_of(BAD_INTS, st.sampled_from(["2", "99", "-1", "0,5"])),
    ("view", "--layers"): st.sampled_from(["2", "0-1000000000", "1-0", "a-b", "-1", "0,,x", "5-7", ","]),
    ("view", "--heads"): st.sampled_from(["4", "0-1000000000", "3-1", "x", "0,9", ","]),
    ("view", "--file"): IN_FILE,
    ("view", "--start"): st.integers(6, 10**12),  # past the prompt: BOS and the 5 bytes of "a b c"
    ("*", "--heads"): BAD_HEADS,
    ("*", "--paths"): BAD_HEADS,
    ("*", "--interventions"): words("zero,ablate", "ZERO", ",", "rope_mid", "zero,,mean2"),
    ("*", "--sink"): st.integers(17, 10**12),  # more sink keys than the 16-token prompt
    ("*", "--method"): words("fast", "EXACT"),
    ("*", "--atlas"): IN_FILE,
    ("patch", "--effects"): IN_FILE,
    ("*", "--effects-from"): IN_FILE,
    ("atlas", "--effects"): words("zero,ablate", ",", "rope_mid"),
    ("*", "--effects-prompts"): st.integers(2, 10**9),  # more than the text pass's 1 prompt
    ("*", "--effects-tokens"): st.integers(17, 10**9),  # more than its 16 tokens
    ("*", "--max-logits-gb"): st.one_of(st.floats(max_value=0), st.sampled_from(["nan", "-inf"])),
    ("*", "--max-batch-gb"): st.one_of(st.floats(max_value=0), st.sampled_from(["nan", "-inf"])),
    ("*", "--template"): words("html", "CHAT"),
    ("*", "--gate"): st.one_of(st.floats(max_value=-0.001), st.floats(min_value=1.0), st.just("nan")),
    ("*", "--pairs"): IN_FILE,
    ("*", "--task"): words("ioi2", "sst", "greater_than"),
    ("*", "--direction"): words("both", "Noise"),
    ("*", "--positions"): words("some", "0,1"),
    ("*", "--metric"): words("accuracy", "ld"),
    ("*", "--n-pairs"): st.integers(max_value=0),
    ("*", "--names"): st.sampled_from(["a,a", "a", "a,b,c", ",", "a,"]),
    ("*", "dirs"): IN_DIR,
    ("*", "folder"): IN_DIR,
    ("*", "source"): st.sampled_from(["{d}/missing", "{d}/a_file", "{d}/a_folder", "nohub"]),
    ("*", "--revisions"): st.sampled_from(["step-99", "x,y", "step-1,nope"]),
}
# options any value of whose type is valid: only unparsable values are drawn
FREE = {"--seed", "--text", "--address", "--window", "--top", "--bootstrap", "--block-size", "--counterfactual-queries",
        "--workers", "--support", "--cluster-points", "--needles", "--max-new-tokens", "--top-k", "--atol", "--n-remove"}
# (command, option) whose bad values are refused after the model loads (they need its tokenizer or its tensors)
AFTER_LOAD = {("scan", "--prompts"), ("atlas", "--prompts"), ("ablate", "--prompts"), ("sweep", "--prompts"),
              ("effects", "--prompts"), ("trajectory", "--prompts"), ("view", "--start"), ("ablate", "--planes"),
              ("trajectory", "--tokens")}
NEEDS = {"--repeats": ["--corpus", "repeated-random"], "--paths": ["--heads", "all"], "--effects-prompts": ["--effects", "zero"],
         "--effects-tokens": ["--effects", "zero"], "--lengths": [], "--sink": ["--interventions", "streaming"]}
NEEDS_BY_COMMAND = {("atlas", "--lengths"): ["--retrieval"], ("atlas", "--depths"): ["--retrieval"], ("atlas", "--repeats"): []}


def _annotation(param) -> type:
    a = param.type_descriptor.annotation
    args = [x for x in typing.get_args(a) if x is not type(None)]
    return args[0] if typing.get_origin(a) in (typing.Union, getattr(__import__("types"), "UnionType", None)) and args else a


def _options(command: str) -> list:
    """The parameters of ``command`` that take a value (flags and --help excluded)."""
    return [p for p in COMMANDS[command].params if not getattr(p, "is_flag", False) and p.name != "help"]


def _name(param) -> str:
    return param.opts[0] if param.opts and param.opts[0].startswith("-") else param.name


def _bad(command: str, param) -> st.SearchStrategy:
    """Bad values of one parameter: its own (``BAD``) for our commands, else those of its type (unparsable, below its
    ``min``, above its ``max``)."""
    name, kind = _name(param), _annotation(param)
    typed = []
    if kind in (int, float):
        typed.append(BAD_INTS if kind is int else st.sampled_from(["", "x", "1,5", "1..2", "--"]))
        if param.min is not None:
            typed.append(st.integers(max_value=int(param.min) - 1) if kind is int else st.floats(max_value=param.min, exclude_max=True))
        if param.max is not None:
            typed.append(st.integers(min_value=int(param.max) + 1) if kind is int else st.floats(min_value=param.max, exclude_min=True))
    if command in OURS and name not in FREE:
        own = BAD.get((command, name), BAD.get(("*", name)))
        if own is not None:
            typed.append(own)
    return st.one_of(*typed) if typed else st.nothing()


def _cases() -> list[tuple[str, str]]:
    return [(c, _name(p)) for c in COMMANDS if c != "models" for p in _options(c)]


def test_every_option_of_our_commands_has_bad_values():
    """A new option gets its bad values here (or joins FREE): the fuzz covers every option, not a sample."""
    missing = [(c, n) for c in OURS for p in _options(c) if (n := _name(p)) not in FREE
               and (c, n) not in BAD and ("*", n) not in BAD and _annotation(p) not in (int, float)]
    assert not missing, missing


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    """A scratch folder with a file, an empty folder, a scan folder (tiny-llama) and a folder of two checkpoints."""
    import torch

    from interp.lab import LabConfig, LabForCausalLM, Vocab, save_lab

    d = tmp_path_factory.mktemp("fuzz")
    (d / "a_file").write_text("x")
    (d / "a_folder").mkdir()
    res = runner.invoke(app, ["scan", "tiny-llama", "--prompts", "1", "--tokens", "16", "--engine", "python", "--out", str(d / "scan")])
    assert res.exit_code == 0, res.output
    vocab = Vocab([f"t{i}" for i in range(20)])
    for step in (1, 2):
        torch.manual_seed(step)
        save_lab(LabForCausalLM(LabConfig(vocab_size=20, n_layers=1, n_heads=2, d_model=16, d_mlp=32, max_positions=64)),
                 vocab, d / "ckpt" / f"step-{step}")
    return d


@pytest.fixture
def loads(monkeypatch, scratch):
    """Counts calls of the model loader (the real one runs), in the scratch folder as working directory."""
    calls = []
    real = interp.models.load_model
    monkeypatch.setattr(interp.models, "load_model", lambda *a, **k: calls.append(a) or real(*a, **k))
    monkeypatch.chdir(scratch)
    return calls


def _tree(d: Path) -> set[str]:
    return {str(p.relative_to(d)) for p in d.rglob("*")}


def _run(d: Path, args: list[str]):
    before = _tree(d)
    res = runner.invoke(app, [a.replace("{d}", str(d)) for a in args])
    after = _tree(d)
    return res, {p for p in after - before if not (p == "out" or p.startswith("out" + os.sep))}


def _refused(res, new: set[str], args: list[str]) -> None:
    text = res.output.strip()
    assert res.exit_code == 2, (args, res.exit_code, text, res.exception)
    assert "Traceback" not in text and isinstance(res.exception, SystemExit), (args, text, res.exception)
    assert len(text.splitlines()) == 1 and text.startswith("error:"), (args, text)
    assert not new, (args, new)


@pytest.mark.parametrize("command,option", _cases())
def test_bad_values_are_one_line_and_exit_2(command, option, loads, scratch):
    param = next(p for p in _options(command) if _name(p) == option)
    strategy = _bad(command, param)
    if strategy.is_empty:
        pytest.skip(f"{command} {option}: no bad values drawn (another change's command: only its typed options are fuzzed)")

    @settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
    @given(value=strategy)
    def check(value):
        base = BASE.get(command, [command])
        extra = NEEDS_BY_COMMAND.get((command, option), NEEDS.get(option, []))
        if option.startswith("-"):
            args = [*base, *extra, option, str(value)]
        else:  # a positional argument: replaces the base's first one (the model, the folder...)
            args = [command, str(value), *base[2:], *extra]
        if command == "view" and option == "--file":
            args = [a for a in args if a not in ("--text", "a b c")]
        loads.clear()
        res, new = _run(scratch, args)
        _refused(res, new, args)
        if (command, option) not in AFTER_LOAD:
            assert not loads, (args, "the model loaded before the refusal")

    check()
