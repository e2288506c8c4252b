"""What every analysis script shares: where figures go, the zoo models it runs on, saving a figure as HTML + PNG, and
the provenance of every table it writes (``provenance.json`` beside the tables: command, date, commit, machine).

Scripts import it as ``from analyses._common import parser, write_rows`` and run as modules from the repository root
(``python -m analyses.p004_slash.band_ablation --quick``)."""

from __future__ import annotations

import argparse
import atexit
import inspect
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd
import torch

ROOT = Path(__file__).resolve().parents[1]
FIGURES = ROOT / "figures"
MODELS = ["smollm2-135m", "gemma-3-270m", "qwen2.5-coder-0.5b"]


def save_figure(fig, out: Path, stem: str) -> str:
    """Write ``out/stem.html`` (plotly.js from its CDN) and ``out/stem.png``; returns what was written.

    PNG export needs kaleido and a Chromium (``pip install kaleido``; ``apt-get install chromium``); without them
    the HTML alone is written and a line says so.
    """
    out.mkdir(parents=True, exist_ok=True)  # a figure redrawn from a saved table may be the first file in out
    fig.write_html(out / f"{stem}.html", include_plotlyjs="cdn")
    try:
        fig.write_image(out / f"{stem}.png", scale=1)
        return "png+html"
    except Exception as e:  # noqa: BLE001  the HTML is written either way
        print(f"PNG export of {stem} skipped ({str(e)[:200]}); wrote {stem}.html")
        return "html"


@contextmanager
def one_thread():
    """Small float64 ops on one thread: with two OpenMP threads each op can wait milliseconds for a busy core."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def installed(names: list[str]) -> list[str]:
    """The models of ``names`` this machine has (``interp.models.is_installed``: tiny models always), in order; one line
    names each other one, so a script run on a machine without the optional zoo models says what it left out."""
    from interp.models import is_installed

    have = [n for n in names if is_installed(n)]
    for n in names:
        if n not in have:
            print(f"{n}: not installed, skipped (`interp models` prints its install command)")
    return have


def parse_set(text: str) -> tuple[str, int]:
    """A prompt set of ``--sets``: ``"stdlib:1024"`` -> ``("stdlib", 1024)``; a bad one raises SystemExit with one line."""
    corpus, _, tokens = text.partition(":")
    if not tokens.isdigit():
        raise SystemExit(f"--sets takes CORPUS:TOKENS (e.g. stdlib:1024), got {text!r}")
    return corpus, int(tokens)


def replace_rows(old: pd.DataFrame, new: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """``old``'s rows whose ``keys`` values ``new`` does not have, then ``new``: runs made again replace their own rows
    in a committed table and every other row stays (scripts that fill their tables in pieces, by model or seed)."""
    have = old.set_index(keys).index.isin(new.set_index(keys).index)
    return pd.concat([old[~have], new], ignore_index=True)


PROVENANCE = "provenance.json"


class _Parser(argparse.ArgumentParser):
    """``argparse`` that, once the arguments parse, records the provenance of the tables the run writes in ``--out``."""

    script: str = ""

    def parse_args(self, args=None, namespace=None):
        ns = super().parse_args(args, namespace)
        _track(ns, self.script, args)
        return ns


def parse_tracked(ap: argparse.ArgumentParser, argv: list[str] | None, script: str) -> argparse.Namespace:
    """``ap.parse_args(argv)``, then :func:`track_outputs` on its ``--out`` for ``script`` (scripts with their own
    parser: the benchmarks)."""
    ns = ap.parse_args(argv)
    _track(ns, script, argv)
    return ns


def _track(ns: argparse.Namespace, script: str, argv: list[str] | None) -> None:
    out = getattr(ns, "out", None)
    if out is not None:
        out = Path(out)
        track_outputs(out.parent if out.suffix == ".csv" else out, script, sys.argv[1:] if argv is None else [str(a) for a in argv])


def parser(doc: str, quick_help: str) -> argparse.ArgumentParser:
    """The options every analysis script takes: ``--models``, ``--quick`` (seconds, for the tests) and ``--out``.

    Parsing its arguments starts :func:`track_outputs` on ``--out`` for the calling script."""
    ap = _Parser(description=doc.splitlines()[0])
    ap.script = inspect.stack()[1].filename
    ap.add_argument("--models", nargs="+", default=MODELS)
    ap.add_argument("--quick", action="store_true", help=quick_help)
    ap.add_argument("--out", type=Path, default=FIGURES)
    return ap


_WRITTEN: set[str] = set()  # real paths this process opened for writing or renamed onto (the audit hook below)
_HOOKED: list[bool] = []


def _audit(event: str, args: tuple) -> None:
    """``sys.addaudithook`` hook: note every file this process opens for writing (``open`` with a w/a/x/+ mode, or
    os-level write flags) and every rename target (``os.rename`` / ``os.replace``, as atomic writes end)."""
    if event == "open":
        path, mode, flags = args
        writes = any(c in mode for c in "wax+") if isinstance(mode, str) else bool(
            (flags or 0) & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND))
        if writes and isinstance(path, (str, bytes, os.PathLike)):
            _WRITTEN.add(os.path.realpath(os.fsdecode(path)))
    elif event == "os.rename":
        _WRITTEN.add(os.path.realpath(os.fsdecode(args[1])))


def track_outputs(out: Path, script: str, args: list[str]) -> None:
    """At interpreter exit, record how every CSV this process wrote (or rewrote) in ``out`` was made, in
    ``out/provenance.json`` (:func:`record_provenance`). ``script``: the analysis file; ``args``: its arguments.

    Which CSVs this process wrote is read from an audit hook (``sys.addaudithook``: files opened for writing, rename
    targets), not only from modification times: two runs writing into ``figures/`` at once, or a ``git merge`` that
    rewrites tables during a run, must not credit each other's tables to this script."""
    if not _HOOKED:
        sys.addaudithook(_audit)
        _HOOKED.append(True)
    atexit.register(record_provenance, Path(out), time.time(), script, list(args))


_SOURCES: dict[str, list[dict]] = {}  # table name -> provenance of the run folders it was merged from (merge_sources)


def merge_sources(names: list[str], dirs: list[Path]) -> None:
    """Note that this process writes the tables ``names`` by joining the tables of the same names in the run folders
    ``dirs`` (e.g. ``copy_2d_rope.py --merge-from``): their entries gain ``sources``, one per folder and table, the
    folder's own ``provenance.json`` entry (its command, seed, date, commit, machine) with ``folder``, or only
    ``folder`` and ``command: null`` for a run written before provenance was recorded."""
    for name in names:
        rows = []
        for d in dirs:
            if not (Path(d) / name).exists():
                continue
            prov = Path(d) / PROVENANCE
            known = json.loads(prov.read_text()).get(name) if prov.exists() else None
            rows.append({"folder": str(d), **(known or {"command": None})})
        _SOURCES[name] = rows


def record_provenance(out: Path, t0: float, script: str, args: list[str]) -> dict:
    """Write one entry per ``*.csv`` in ``out`` this process wrote since ``t0`` (epoch seconds; with
    :func:`track_outputs`' audit hook installed, only the files it saw this process write) into ``out/provenance.json``,
    keeping the entries of other tables: ``script`` (relative to the repository), ``command`` (the line that reruns it
    from the repository root: ``python -m analyses.GROUP.SCRIPT ARGS``, :func:`run_command`),
    ``date`` (UTC, ISO 8601), ``seconds`` (the run's wall time), ``commit`` (``git`` HEAD, ``+dirty`` with uncommitted
    changes outside ``out``: a run's own tables do not count), ``machine`` (OS, CPUs, torch, GPU), and ``sources`` for a table joined from run folders
    (:func:`merge_sources`). Returns the new entries; nothing happens if ``out`` is gone."""
    out = Path(out)
    if not out.is_dir():
        return {}
    names = sorted(p.name for p in out.glob("*.csv") if p.stat().st_mtime >= t0
                   and (not _HOOKED or os.path.realpath(p) in _WRITTEN))  # written by this process, not only since t0
    if not names:
        return {}
    path = Path(script).resolve()
    rel = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(script)
    entry = {"script": rel, "command": shlex.join(["python", *run_command(rel), *args]),
             "date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "seconds": round(time.time() - t0, 1),
             "commit": _commit(out), "machine": _machine()}
    file = out / PROVENANCE
    table = json.loads(file.read_text()) if file.exists() else {}
    new = {n: {**entry, "sources": _SOURCES[n]} if n in _SOURCES else entry for n in names}
    table.update(new)
    file.write_text(json.dumps(dict(sorted(table.items())), indent=1) + "\n")
    return new


def run_command(rel: str) -> list[str]:
    """What follows ``python`` to run the script ``rel`` (relative to the repository): ``["-m", "analyses.p004_slash.band_ablation"]``
    for ``analyses/p004_slash/band_ablation.py`` (the scripts are modules of the ``analyses`` package, run from the
    repository root); ``[rel]`` for a file outside ``analyses/``."""
    if rel.startswith("analyses/") and rel.endswith(".py"):
        return ["-m", rel[: -len(".py")].replace("/", ".")]
    return [rel]


def _commit(out: Path | None = None) -> str:
    """``git`` HEAD, ``+dirty`` when tracked files other than those in ``out`` (the run's own tables) differ from it."""
    skip = []
    if out is not None and Path(out).resolve().is_relative_to(ROOT):
        skip = [f":(exclude){Path(out).resolve().relative_to(ROOT).as_posix()}"]
    try:
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True,
                              timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no", "--", ".", *skip],
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return (head + ("+dirty" if dirty else "")) if head else "unknown"


def _machine() -> str:
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    return (f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
            f"torch {torch.__version__}, {gpu}")


# --------------------------------------------------------------------------- shared by analyses/effects (issue 32 part 3)

QUICK_MODEL = "tiny-llama"


def run_models(args) -> list[str]:
    """The models of a run: ``tiny-llama`` in quick mode, else the installed ones of ``--models``. Sets one torch
    thread (the machine is shared; timings are not what these scripts measure)."""
    torch.set_num_threads(1)
    return [QUICK_MODEL] if args.quick else installed(args.models)


def load_cpu(name: str):
    """``interp.load_model(name)`` on the CPU (zoo models come from their installed packages, nothing from a hub)."""
    import interp

    return interp.load_model(name, device="cpu")


def atlas_of(model, quick: bool) -> pd.DataFrame:
    """The model's atlas table: ``figures/atlas_<model>.csv`` (``analyses/atlas/head_atlas.py``), or in quick mode a
    small atlas run here (2 x 96 tokens, no InP, one plane per band ablated: long enough for the streaming window of
    64 keys)."""
    if not quick:
        return pd.read_csv(FIGURES / f"atlas_{model.card.name}.csv")
    from interp.experiments.atlas import AtlasConfig, run_atlas

    return run_atlas(model, AtlasConfig(prompts=2, tokens=96, inp=False, ablate=True, n_remove=1)).table


def mean_interval(values, n: int = 1000, seed: int = 0) -> tuple[float, float, float]:
    """``(mean, lo, hi)``: the mean of ``values`` (one per prompt, trial or head) and its 95% percentile bootstrap
    interval (``interp.experiments.effects.bootstrap_interval``, ``n`` seeded resamples)."""
    import numpy as np

    from interp.experiments.stats import bootstrap_interval

    v = np.asarray(values, dtype=float)[None]
    lo, hi = bootstrap_interval(v, n, seed)
    return float(v.mean()), float(lo[0]), float(hi[0])


def write_rows(df: pd.DataFrame, path: Path, keys: tuple[str, ...] = ("model",), merge: bool = True,
               float_format: str | None = None) -> pd.DataFrame:
    """Write ``df`` to ``path``, replacing the rows of its ``keys`` values and keeping the others (a run of one model
    leaves the other models' rows, ``replace_rows``); ``merge=False`` writes ``df`` alone (quick runs);
    ``float_format`` (``"%.6g"``) keeps large per-head tables small; returns what was written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if merge and path.exists():
        df = replace_rows(pd.read_csv(path), df, list(keys))
    df.to_csv(path, index=False, float_format=float_format)
    return df

