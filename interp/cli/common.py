"""What every command shares: the typer ``app``, the console, the options used by several commands (defined once), and
the checks that run before a model loads (one line naming the problem and the fix, exit 2)."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from interp.errors import ConfigError, InterpError

app = typer.Typer(help="Attention-geometry toolkit: find slash-dominant heads, sinks and low-rank q/k in open LMs, offline.",
                  no_args_is_help=True, pretty_exceptions_enable=False)
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
WORKERS = typer.Option(2, help="Ray workers (each loads the model once); ignored by --executor local")
ADDRESS = typer.Option(None, help="an existing Ray cluster to join (auto, ray://host:10001); default: start a local one")
CORPUS = typer.Option("pydoc", help="pydoc | stdlib | random | repeated-random (BOS, r, r: induction heads' input)")
REPEATS = typer.Option(2, help="copies of the random sequence in --corpus repeated-random (RazorAttention uses 4)")
MEASURE = typer.Option([], "--measure", help="switch on an optional measure (repeatable): inp, geometry, token_match, echo, massive, shape, "
                       "heavy_hitters; "
                       "--measure list prints every registered measure and exits")
PROMPTS = typer.Option(8, help="number of prompts")
TOKENS = typer.Option(1024, help="tokens per prompt")
SEED = typer.Option(0, help="prompt selection seed")
# options shared by the head-table commands (effects, patch)
ATLAS = typer.Option(None, help="an atlas.csv (interp atlas) whose roles the page shows on hover")


def top_option(what: str):
    """The ``--top`` option of a command that prints its ``what`` table's first rows (10 by default)."""
    return typer.Option(10, help=f"rows of the {what} table to print")


def fail(err: Exception) -> None:
    """Print ``err`` as one red line (not read as rich markup) and exit 2: every refused input ends here."""
    console.print(f"[bold red]error:[/] {escape(str(err))}", soft_wrap=True)  # one line; escaped: '.[gemma]' is not rich markup
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
            io.check_input_dir(model[len("local:"):], "model local:")
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


def check_engine(engine: str, device: str) -> None:
    """One line and exit 2 for an engine that cannot run on ``device`` (before any model loads)."""
    from interp.engine.collector import check_engine

    try:
        check_engine(engine, device)
    except InterpError as err:
        fail(err)


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
    """Comma-separated integers (``None`` for ``None`` or, with ``allow_all``, ``"all"``); else one line, exit 2."""
    if spec is None or (allow_all and spec == "all"):
        return None
    try:
        return [int(x) for x in spec.split(",") if x.strip()]
    except ValueError:
        fail(InterpError(f"{what} takes comma-separated integers (e.g. {example})" + (" or 'all'" if allow_all else "")
                          + f", got {spec!r}"))


def float_list(spec: str, what: str, example: str) -> list[float]:
    """Comma-separated numbers; else one line, exit 2."""
    try:
        return [float(x) for x in spec.split(",") if x.strip()]
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
