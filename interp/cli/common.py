"""What every command shares: the typer ``app``, the console, the options used by several commands (defined once), and
the checks that run before a model loads (one line naming the problem and the fix, exit 2)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, List, Optional, Sequence

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from interp.errors import ConfigError, InterpError, PromptError

try:  # typer >= 0.22 ships its own copy of click; older ones use click itself
    from typer._click.exceptions import NoArgsIsHelpError, UsageError
except ImportError:  # pragma: no cover - depends on the installed typer
    from click.exceptions import NoArgsIsHelpError, UsageError

if TYPE_CHECKING:
    from interp.models.grid import ModelShape


class Commands(typer.core.TyperGroup):
    """interp's command group: a usage error that click finds while parsing a command's options (a value of the wrong
    type or outside its range, an unknown option, a missing argument, an unknown command) is one line naming it and
    the command's ``--help``, exit 2, like every other refused input (click prints a usage block and a framed panel)."""

    def invoke(self, ctx: typer.Context):
        try:
            return super().invoke(ctx)
        except UsageError as err:
            if isinstance(err, NoArgsIsHelpError):
                raise
            where = err.ctx.command_path if err.ctx is not None else ctx.command_path
            fail(InterpError(f"{' '.join(err.format_message().split())} (see {where} --help)"))


app = typer.Typer(help="Attention-geometry toolkit: find slash-dominant heads, sinks and low-rank q/k in open LMs, offline.",
                  no_args_is_help=True, pretty_exceptions_enable=False, cls=Commands)
console = Console()


# options shared by the commands that scan a corpus
MODEL = typer.Argument("smollm2-135m", help="zoo name, ORG/NAME (Hugging Face hub id) or local:PATH")
DEVICE = typer.Option("auto", help="cpu | cuda | auto (cuda when available)")
DTYPE = typer.Option("float32", help="float32 | bfloat16 | float16 (the model's; scan sums stay float64)")
ENGINE = typer.Option("auto", help="attention engine: auto (Triton on a GPU, the fused C++ kernel on CPU float32, else "
                      "Python) | triton | cpu-kernel | python; results agree to float rounding")
DEVICE_MAP = typer.Option(None, "--device-map", help="auto: place the layers over the GPUs and the CPU (accelerate), "
                          "for models larger than one GPU; overrides --device")
EXECUTOR = typer.Option("local", help="local (this process) | ray (workers on a local or existing Ray cluster)")
WORKERS = typer.Option(2, min=1, help="Ray workers (each loads the model once); ignored by --executor local")
ADDRESS = typer.Option(None, help="an existing Ray cluster to join (auto, ray://host:10001); default: start a local one")
RETRIES = typer.Option(3, min=0, max=100, help="--executor ray: restarts of a worker that dies (killed, node lost) and "
                       "retries of its chunk before the run fails")
CORPUS = typer.Option("pydoc", help="pydoc | stdlib | random | repeated-random (BOS, r, r: induction heads' input)")
REPEATS = typer.Option(2, min=1, help="copies of the random sequence in --corpus repeated-random (RazorAttention uses 4)")
MEASURE = typer.Option([], "--measure", help="switch on an optional measure (repeatable): inp, geometry, token_match, echo, massive, shape, "
                       "kv_budget, heavy_hitters; "
                       "--measure list prints every registered measure and exits")
PROMPTS = typer.Option(8, min=1, help="number of prompts")
BLOCK_SIZE = typer.Option(32, min=1, help="queries per attention block")
SEED = typer.Option(0, help="prompt selection seed")
# options shared by the head-table commands (effects, patch)
ATLAS = typer.Option(None, help="an atlas.csv (interp atlas) whose roles the page shows on hover")


def tokens_option(default: int = 1024, help: str = "tokens per prompt"):
    """The ``--tokens`` option (at least 2: one prediction); above the model's context it is refused by
    ``check_before_load``."""
    return typer.Option(default, min=2, help=help)


TOKENS = tokens_option()


def top_option(what: str, default: int = 10):
    """The ``--top`` option of a command that prints its ``what`` table's first rows (``default`` of them)."""
    return typer.Option(default, min=0, help=f"rows of the {what} table to print")


# the characters str.splitlines breaks a line at, written as their escapes in a message (a value typed by the user or
# echoed by a library, e.g. torch's 'Invalid device string' quoting a control character)
_LINE_BREAKS = str.maketrans({c: repr(c)[1:-1] for c in "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"})


def fail(err: Exception) -> None:
    """Print ``err`` as one red line (not read as rich markup; any line break in it written as its escape) and exit 2:
    every refused input ends here."""
    text = escape(str(err).translate(_LINE_BREAKS))  # escaped: '.[gemma]' is not rich markup
    console.print(f"[bold red]error:[/] {text}", soft_wrap=True)
    raise typer.Exit(2)


def plural(n: int, word: str) -> str:
    """``"1 prompt"``, ``"8 prompts"``."""
    return f"{n} {word}{'' if n == 1 else 's'}"


_FILE_SUFFIXES = (".html", ".htm", ".csv", ".json", ".pt")

def check_measures(measure: List[str]) -> None:
    """``--measure list``: print the registry (name, how it is switched on, columns, options) and exit 0; other names
    are checked here, before any model loads (one line, exit 2, for an unknown one)."""
    from interp.engine.config import ScanConfig, measure_rows, switch_on

    if "list" not in measure:
        try:
            switch_on(ScanConfig(), measure)
        except InterpError as err:
            fail(err)
        return

    table = Table(title="measures (interp.measures.REGISTRY, in heads.csv column order)")
    for col in ("measure", "on", "columns", "options", "summary"):
        table.add_column(col, overflow="fold")
    for r in measure_rows():
        table.add_row(*(escape(str(r[c])) for c in ("measure", "on", "columns", "options", "summary")))
    console.print(table)
    raise typer.Exit(0)


def check_paths(out_dir: Optional[Path] = None, out_file: Optional[Path] = None, *, writes: str = "",
                 files: Optional[dict[str, Optional[Path]]] = None, scans: Optional[List[Path]] = None, scan_hint: str = "",
                 model: Optional[str] = None) -> None:
    """Check every path a command reads or writes, before it loads a model; a bad one: one line naming it and the fix, exit 2.

    ``out_dir``: the ``--out`` folder (``writes`` says what goes in it; a name ending in .html, .csv... is refused
    as a likely file name); ``out_file``: the ``--out`` file; ``files``: ``{option: path}`` input files; ``scans``:
    output folders of interp scan / merge to read (each needs ``state/``); ``model``: a ``local:PATH`` must be a folder.
    Nothing is created here (``interp.io``).
    """
    from interp import io

    try:
        if model is not None and model.startswith("local:"):
            io.check_input_dir(model[len("local:"):], "model local:", ("config.json",),
                               "local:PATH names a Hugging Face model folder (config.json, tokenizer, weights)")
        for option, path in (files or {}).items():
            if path is not None:
                io.check_input_file(path, option)
        for d in scans or []:
            io.check_input_dir(d, "scan folder", ("state",), scan_hint)
        if out_dir is not None:
            if out_dir.suffix.lower() in _FILE_SUFFIXES and not out_dir.is_dir():
                raise InterpError(f"--out {out_dir} looks like a file name, but --out names a folder here ({writes}); "
                                  f"give a folder name such as {out_dir.with_suffix('')}")
            io.check_output_dir(out_dir)
        if out_file is not None:
            io.check_output_file(out_file)
    except InterpError as err:
        fail(err)


def show_table(df, title: str, cols: list[str], n: int) -> None:
    """Print the first ``n`` rows of ``df``'s columns ``cols`` (those present) as a rich table, floats to 4 digits."""
    table = Table(title=title)
    cols = [c for c in cols if c in df]
    for c in cols:
        table.add_column(c, justify="right")
    for row in df[cols].head(n).itertuples(index=False):
        table.add_row(*[f"{v:.4g}" if isinstance(v, float) else str(v) for v in row])
    console.print(table)


def top_sdh(heads, n: int) -> None:
    """Print the ``n`` strongest slash-dominant heads of a ``heads.csv`` frame (``is_sdh``, by ``slash_score``)."""
    sdh = heads[heads["is_sdh"]].sort_values("slash_score", ascending=False)
    show_table(sdh, f"Top slash-dominant heads ({len(sdh)} of {len(heads)} heads have score >= kappa at a lag 0..4)",
          ["layer", "head", "slash_delta", "slash_score", "r1_q", "r1_k", "sink_weight", "ood_ratio"], n)


def long_summary(heads, result) -> None:
    """Print how many heads are long-range SDHs (``is_sdh_long``) and how many long lags are content repeats
    (``result``: the scan, a ``ScanResult``); for prompts too short for any long lag, why long_slash.csv and
    content_repeats.csv hold only their header and the ``--tokens`` that would fill them."""
    from interp.measures.slash import long_min_tokens, no_long_lags

    cfg = result.config
    if why := no_long_lags(result):
        console.print(f"long range: {why}; long_slash.csv and content_repeats.csv have only their header "
                      f"(--tokens {long_min_tokens(cfg)} or more fills them)", soft_wrap=True)
        return
    if heads["long_any_slash_score"].isna().all():
        return
    n = int(heads["is_sdh_long"].sum())
    rep = int(((heads["long_any_slash_score"] >= cfg.kappa_long) & (heads["long_any_prompt_frac"] < cfg.long_min_frac - 1e-12)).sum())
    console.print(f"long range: {n} heads have a lag that holds in >= {cfg.long_min_frac:.0%} of prompts (is_sdh_long); "
                  f"{rep} heads' best long lag holds in fewer (content repeats, see content_repeats.csv)")


def parse_shard(spec: Optional[str]) -> tuple[int, int]:
    """``--shard I/N`` as ``(I, N)`` (``(0, 1)`` for ``None``); anything else: one line, exit 2."""
    if spec is None:
        return 0, 1
    try:
        i, n = (int(x) for x in spec.split("/"))
        assert 0 <= i < n
    except (ValueError, AssertionError):
        fail(InterpError(f"--shard takes I/N with 0 <= I < N (e.g. 0/4), got {spec!r}"))
    return i, n


def int_list(spec: Optional[str], what: str, example: str = "0,4,8", allow_all: bool = True) -> Optional[list[int]]:
    """Comma-separated integers, at least one (``None`` for ``None`` or, with ``allow_all``, ``"all"``); else one line,
    exit 2."""
    if spec is None or (allow_all and spec == "all"):
        return None
    try:
        out = [int(x) for x in spec.split(",") if x.strip()]
        if not out:
            raise ValueError(spec)
        return out
    except ValueError:
        fail(InterpError(f"{what} takes comma-separated integers (e.g. {example})" + (" or 'all'" if allow_all else "")
                          + f", got {spec!r}"))


def float_list(spec: str, what: str, example: str) -> list[float]:
    """Comma-separated numbers, at least one; else one line, exit 2."""
    try:
        out = [float(x) for x in spec.split(",") if x.strip()]
        if not out:
            raise ValueError(spec)
        return out
    except ValueError:
        fail(InterpError(f"{what} takes comma-separated numbers (e.g. {example}), got {spec!r}"))


def parse_heads(spec: str | None) -> tuple[tuple[int, int], ...] | None:
    """``"all"`` / None -> None (every head); ``"3:1,17:0"`` -> ``((3, 1), (17, 0))``.

    Raises:
        ConfigError: an empty list, or an entry that is not ``LAYER:HEAD`` with non-negative integers.
    """
    if spec is None or spec.strip() == "all":
        return None
    items = [s.strip() for s in spec.split(",") if s.strip()]
    if not items:
        raise ConfigError("--heads is empty; give 'all' or LAYER:HEAD pairs, e.g. 3:1,17:0")
    out = []
    for s in items:
        a, sep, b = s.partition(":")
        if not sep or not a.strip().isdigit() or not b.strip().isdigit():
            raise ConfigError(f"--heads entry {s!r} is not LAYER:HEAD (non-negative integers, e.g. 3:1); or use 'all'")
        out.append((int(a), int(b)))
    return tuple(dict.fromkeys(out))


MAX_TOKENS = 2**26  # prompts x tokens of one run: 512 MB of token ids (a scan of 8 x 32k prompts is 2**18)


def check_before_load(model: Optional[str] = None, *, device: Optional[str] = None, dtype: Optional[str] = None,
                      device_map: Optional[str] = None, engine: Optional[str] = None, executor: Optional[str] = None,
                      corpus: Optional[str] = None, atlas_passes: bool = False, prompts: Optional[int] = None,
                      tokens: Optional[int] = None, repeats: Optional[int] = None, lengths: Sequence[int] = (),
                      beyond_context: Optional[bool] = None, heads: Optional[Sequence[tuple[int, int]]] = None,
                      layers: Optional[Sequence[int]] = None) -> Optional["ModelShape"]:
    """Everything a command can check before its model loads; a bad value: one line naming it and the fix, exit 2.

    Args:
        model: the model name (an unknown name, a zoo model not installed: the loader's own message); its grid and
            context are read from its configuration alone (``interp.models.grid.model_shape``: a tiny model's config,
            ``config.json``, a GGUF header), never from the weights.
        device, dtype, device_map, engine, executor: checked by name (and the device for availability).
        corpus: a corpus name (``interp.corpus.CORPORA``); ``atlas_passes``: the command runs a text pass on
            ``corpus`` (pydoc or stdlib only) and a repeated-random pass (``repeats`` must fit), as ``interp atlas``.
        prompts: how many prompts; with the longest prompt at most ``MAX_TOKENS`` tokens in all (a random corpus has no
            size of its own to refuse a billion prompts; the text corpora's sizes are checked after the tokenizer loads).
        tokens: prompt length in tokens, at most the model's context; ``repeats`` copies of r in repeated-random must
            fit in it.
        lengths: prompt lengths (sweep, retrieval), each at most the context unless ``beyond_context`` (sweep's
            ``--beyond-context``: None where the command has no such option).
        heads: ``(layer, head)`` pairs, ``layers``: layer numbers, all inside the grid.

    Returns:
        The model's ``ModelShape``, or None where it cannot be read without loading (a hub id not in the local cache,
        a zoo model not installed...): the same checks then run after the load, in the experiment code.
    """
    from interp.models.grid import model_shape

    shape = None
    try:
        if device is not None or dtype is not None:
            from interp.models.scope import resolve_device, resolve_dtype

            resolve_device(device)
            resolve_dtype(dtype)
        if engine is not None:
            from interp.engine.collector import check_engine

            check_engine(engine, device or "auto")
        if device_map is not None and device_map != "auto":
            raise ConfigError(f"unknown --device-map {device_map!r}; use auto")
        if executor is not None and executor not in ("local", "ray"):
            raise ConfigError(f"unknown --executor {executor!r}; use local or ray")
        if corpus is not None:
            from interp.corpus import CORPORA

            if atlas_passes and corpus in CORPORA and corpus not in ("pydoc", "stdlib"):
                raise PromptError(f"--corpus {corpus} is not a text corpus; use pydoc or stdlib")
            if corpus not in CORPORA:
                raise PromptError(f"unknown --corpus {corpus!r}; use one of "
                                  f"{', '.join(CORPORA[:2] if atlas_passes else CORPORA)}")
            n = tokens or max(lengths, default=0)
            if prompts is not None and prompts * n > MAX_TOKENS:
                raise PromptError(f"--prompts {prompts} x {n} tokens is {prompts * n:,} tokens, more than the "
                                  f"{MAX_TOKENS:,} one run takes; ask for fewer prompts")
            if (corpus == "repeated-random" or atlas_passes) and repeats is not None and n and repeats > n - 1:
                raise PromptError(f"--repeats {repeats} copies do not fit in {n}-token prompts (BOS, then the copies); use "
                                  f"--repeats 1..{n - 1} or longer prompts")
        if model is not None:
            _check_model_name(model)
            shape = model_shape(model)
        if shape is not None:
            _check_shape(model, shape, tokens, lengths, beyond_context, heads, layers)
    except InterpError as err:
        fail(err)
    return shape


def _check_model_name(model: str) -> None:
    """Raise the loader's own error for a name it can never load: not a zoo name, ``local:PATH`` or hub id
    (``UnknownModelError``, the valid names), or a zoo model whose package is missing (``ModelNotInstalledError``, the
    install command)."""
    from interp.models.zoo import ZOO, is_installed

    if model.startswith("local:") or ("/" in model and not model.startswith(("/", ".", "~"))):
        return
    if not is_installed(model):  # UnknownModelError for a name that is not in the zoo
        ZOO[model].source.chunks()  # ModelNotInstalledError with the install command


def _check_shape(model: str, shape: "ModelShape", tokens: Optional[int], lengths: Sequence[int],
                 beyond_context: Optional[bool], heads, layers) -> None:
    """``check_before_load``'s checks against the model's grid and context (raises ``InterpError``)."""
    if heads:
        from interp.hooks.heads import check_heads

        check_heads(heads, shape.n_layers, shape.n_heads)
    bad = [x for x in layers or () if not 0 <= x < shape.n_layers]
    if bad:
        raise ConfigError(f"--layers: layer {bad[0]} is outside {model}'s {shape.n_layers} layers; use layers "
                          f"0..{shape.n_layers - 1}")
    ctx = shape.context_length
    if ctx is None:
        return
    if tokens is not None and tokens > ctx and not beyond_context:
        raise PromptError(f"--tokens {tokens} exceeds the context of {model} ({ctx}); use --tokens {ctx} or fewer")
    longest = max(lengths, default=0)
    if longest > ctx and not beyond_context:
        hint = (" or pass --beyond-context to measure out-of-distribution positions on purpose"
                if beyond_context is not None else "")
        raise PromptError(f"--lengths: {longest} exceeds the context of {model} ({ctx}); use lengths up to {ctx}{hint}")
