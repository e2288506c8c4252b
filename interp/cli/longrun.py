"""Long runs of ``interp scan``, ``effects``, ``patch``, ``sweep``, ``ablate``, ``atlas``, ``retrieval`` and
``trajectory``: finished units of work kept
in ``OUT``, ``--resume``, and Ctrl-C / SIGTERM that keep what is done (issue 46, parts 1 and 2). Not a command: the
helpers those commands share.

Layout of ``OUT``: ``run.json`` (the manifest: command, settings, model identity, ``complete``) and ``units/``, one
entry per finished unit (a prompt's scan state, ``units/prompt-00003/``; an effects layer, ``units/layer-002.npz``; a
patch layer of the pairs of one token length, ``units/layer-002-len-00012.npz``, or with ``--paths`` a sender's,
``units/path-000-01-len-00012.npz``; a sweep's prompt at one length, ``units/length-001024-prompt-00001/``; a retrieval
trial, a trajectory checkpoint, a causal ablation band: ``.pkl`` files), each written atomically
(``interp.io.write_dir_atomic`` / ``write_atomic``): a unit whose write was cut off has no entry under its name, so a
resumed run redoes it.

- Without ``--resume``, an ``OUT`` whose manifest says the run is not complete is refused (one line naming ``--resume``
  and ``--force``) before any model work; ``--force`` discards its units.
- With ``--resume``, the settings and then the model must equal the manifest's (one line naming the first difference);
  finished units are read back instead of recomputed, so the final tables equal an uninterrupted run's.
- ``interruptible()`` turns SIGINT / SIGTERM into ``Interrupted`` (raised like ``KeyboardInterrupt``, so the unit in
  flight unwinds and its temporary file is removed); the command writes its tables from the finished units, marks them partial and
  exits 130 / 143 (``stop``).
- ``keep_units`` (the loop that reads finished units back, writes the others and counts one stopped after its rename)
  is ``interp.experiments.units.keep_units`` with the signals above, so the experiments that keep their own units
  (retrieval, trajectory, ``ablate --causal``, ``patch --paths``) share it without importing ``interp.cli``.
- Ray runs keep the same units: the driver writes each unit as its worker's result comes back (``scan_units`` with
  ``actors``; ``interp.experiments.sharded.effects_on_workers`` with a ``LayerStore``, ``patch_on_workers`` with a
  units folder), so a driver that dies or is stopped resumes on Ray or locally.
"""

from __future__ import annotations

import json
import shutil
import signal
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

import typer

from interp.errors import InterpError
from interp.io import write_text_atomic

MANIFEST = "run.json"
UNITS = "units"
RESUME = typer.Option(False, "--resume", help="continue the run in --out (same settings and model; finished units are "
                      "read back, the tables equal an uninterrupted run's)")
FORCE = typer.Option(False, "--force", help="discard a partial run in --out and start over")


class Interrupted(BaseException):
    """SIGINT or SIGTERM arrived inside ``interruptible()``. ``signum``: the signal; ``exit_code``: 128 + signum (130 for
    SIGINT, 143 for SIGTERM), the shell's convention. A ``BaseException``, like ``KeyboardInterrupt``, so that no
    ``except Exception`` on the way (a state file's reader turning any error into ``CorruptStateError``) swallows it."""

    def __init__(self, signum: int):
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = signum
        self.exit_code = 128 + signum


@contextmanager
def interruptible() -> Iterator[None]:
    """Inside the block, SIGINT and SIGTERM raise ``Interrupted`` in the main thread (once: the handlers are restored at
    the first signal, so a second Ctrl-C while the partial tables are written stops the process the usual way).
    Elsewhere than the main thread (signal handlers cannot be set there) the block runs unchanged."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}

    def restore() -> None:
        for s, h in old.items():
            signal.signal(s, h)

    def handler(signum, frame):
        restore()
        raise Interrupted(signum)

    for s in old:
        signal.signal(s, handler)
    try:
        yield
    finally:
        restore()


def first_difference(old: dict, new: dict) -> str | None:
    """``"--NAME is NEW here but OLD in the run"`` for the first key (in ``new``'s order, then ``old``'s) whose values
    differ, or None when the dicts are equal. Keys are option names without dashes, ``_`` for ``-``."""
    for k in [*new, *(k for k in old if k not in new)]:
        if old.get(k) != new.get(k):
            return f"--{k.replace('_', '-')} is {new.get(k)!r} here but {old.get(k)!r} in the run being resumed"
    return None


def model_identity(card) -> dict:
    """What names a model's weights in a manifest: zoo name, pinned file sha256 (empty for in-memory and hub models)
    and source (``ModelCard`` fields)."""
    return {"name": card.name, "sha256": card.sha256, "source": card.source}


def file_sha256(path: Path | None) -> str | None:
    """The sha256 of an input file's bytes (a pairs file, a prompt list: a setting whose content, not only its name,
    must match on ``--resume``), or None for no file."""
    import hashlib

    if path is None:
        return None
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


@dataclass
class RunDir:
    """The manifest and units of one command's run in ``out``.

    Attributes:
        out: the ``--out`` folder.
        command: the command's name (``"scan"``, ``"effects"``, ``"atlas"``...).
        settings: every option that changes the numbers (JSON-able), compared on ``--resume``.
        resume: continue the run in ``out`` (``--resume``).
    """

    out: Path
    command: str
    settings: dict
    resume: bool = False

    @property
    def manifest_path(self) -> Path:
        """``out/run.json``."""
        return self.out / MANIFEST

    @property
    def units_dir(self) -> Path:
        """``out/units``."""
        return self.out / UNITS

    def manifest(self) -> dict | None:
        """The manifest in ``out``, or None when there is none (or it cannot be read: treated as no run)."""
        try:
            return json.loads(self.manifest_path.read_text())
        except (OSError, ValueError):
            return None

    def check(self, force: bool = False) -> None:
        """Before any model work: refuse a partial run (one with finished units) in ``out`` without ``--resume`` /
        ``--force``, and on ``--resume`` settings other than the manifest's. ``force`` discards the units of an earlier run.

        Raises:
            InterpError: one line naming ``--resume`` and ``--force``, or the first setting that differs.
        """
        m = self.manifest()
        if self.resume and force:
            raise InterpError("--resume and --force contradict each other: --resume continues the run in --out, --force "
                              "discards it; give one")
        if m is None:
            return
        if not self.resume:
            n = len(self.finished())
            if not m.get("complete") and not force and n:  # a run that finished no unit has nothing to lose
                raise InterpError(f"--out {self.out} holds a partial {m.get('command', '?')} run ({n} finished units); add "
                                  f"--resume to continue it, or --force to discard it and start over")
            return
        if m.get("command") != self.command:
            raise InterpError(f"--out {self.out} holds an interp {m.get('command')} run, not interp {self.command}; choose "
                              f"another --out, or --force to discard it")
        diff = first_difference(m.get("settings", {}), self.settings)
        if diff:
            raise InterpError(f"cannot resume {self.out}: {diff} ({self.manifest_path}); rerun with its settings, or "
                              f"--force to discard it and start over")

    def begin(self, model: dict, units: int) -> None:
        """After the model loaded: on ``--resume``, check ``model`` (``model_identity``) against the manifest; else
        discard the units of an earlier run (on ``--resume``: the temporary entries of cut-off writes). Then write the
        manifest (``complete`` false; ``units``: how many the run has).

        Raises:
            InterpError: on ``--resume``, another model than the manifest's (one line naming the differing field).
        """
        m = self.manifest() if self.resume else None
        if m is not None and m.get("model") is not None:
            for k in model:
                if m["model"].get(k) != model[k]:
                    raise InterpError(f"cannot resume {self.out}: the model's {k} is {model[k]!r} here but "
                                      f"{m['model'].get(k)!r} in the run being resumed; load the same model, or --force")
        if m is None and self.units_dir.exists():
            shutil.rmtree(self.units_dir)
        elif self.units_dir.is_dir():  # temporary entries of writes cut off by a kill: their units are redone
            for p in self.units_dir.glob(".*"):
                if p.is_dir():
                    shutil.rmtree(p)
                else:
                    p.unlink()
        self.out.mkdir(parents=True, exist_ok=True)
        self._write(model, units, complete=False)

    def finish(self) -> None:
        """Mark the run complete (every unit done and the final tables written)."""
        m = self.manifest() or {}
        self._write(m.get("model", {}), m.get("units", 0), complete=True)

    def _write(self, model: dict, units: int, complete: bool) -> None:
        write_text_atomic(self.manifest_path, json.dumps({"command": self.command, "settings": self.settings,
                                                          "model": model, "units": units, "complete": complete}, indent=1))

    def unit(self, name: str) -> Path:
        """Where the unit ``name`` lives (a folder or a file; it exists only once finished)."""
        return self.units_dir / name

    def finished(self) -> list[str]:
        """Names of the finished units (temporary entries of interrupted writes excluded)."""
        if not self.units_dir.is_dir():
            return []
        return sorted(p.name for p in self.units_dir.iterdir() if not p.name.startswith("."))


def open_run(out: Path, command: str, settings: dict, resume: bool, force: bool, refuse: str | None = None) -> RunDir:
    """The command's ``RunDir``, checked before any model work (``RunDir.check``): a refusal ends the command with one
    line and exit 2 (``interp.cli.common.fail``). ``refuse``: a reason the options given cannot run together (e.g.
    ``--shard`` with ``--executor ray``), refused before the manifest is read."""
    from interp.cli.common import fail

    run = RunDir(out, command, settings, resume)
    try:
        if refuse:
            raise InterpError(refuse)
        run.check(force)
    except InterpError as err:
        fail(err)
    return run


def stop(err: Interrupted, done: int, total: int, what: str, out: Path) -> None:
    """After the partial tables are written: print ``partial: DONE of TOTAL WHAT`` and how to resume, then exit with
    ``err.exit_code`` (130 for SIGINT, 143 for SIGTERM)."""
    from interp.cli.common import console

    console.print(f"partial: {done} of {total} {what} ({err}); the finished ones are kept in {out}/{UNITS}", soft_wrap=True)
    console.print(f"to resume: run the same command again with --resume (settings in {out}/{MANIFEST})", soft_wrap=True)
    raise typer.Exit(err.exit_code)


def keep_units(run: RunDir, names: Sequence[str], compute: Callable[[list[str]], Iterable[tuple[str, object]]],
               load: Callable[[Path], object], save: Callable[[Path, object], object], bar=None) -> tuple[dict, Interrupted | None]:
    """``interp.experiments.units.keep_units`` on ``run``'s units, with SIGINT / SIGTERM (``interruptible``) ending the
    loop after the last finished unit: each unit of ``names`` already finished in ``run`` is read back, the others
    computed (``compute(todo)`` yields ``(name, result)`` in any order), saved atomically and read back; a signal
    between a unit's rename and its read-back still counts that unit. ``bar``: a tqdm bar, advanced once per finished
    unit.

    Returns:
        ``({name: result} of the finished units in ``names``' order, Interrupted or None)``.

    Raises:
        InterpError: from ``compute`` (the engine; a Ray call past its retries).
    """
    from interp.experiments.units import keep_units as keep

    with interruptible():
        return keep(run.units_dir, names, compute, load, save, bar, stop_on=(Interrupted,))


def scan_units(run: RunDir, model, prompts, ids, cfg, meta: dict, engine: str, kind: str, beyond_context: bool = False,
               actors: list | None = None):
    """Scan ``prompts`` (``[pos]`` token tensors; ``ids``: their global indices) one prompt per unit, each unit's state
    saved in ``run`` as ``KIND-IIIII/`` (``interp.engine.ScanResult.save``, atomically as a folder) and finished units
    read back instead of scanned (``keep_units``); SIGINT / SIGTERM stop after the last finished unit. ``interp scan``
    (a unit per prompt), ``interp ablate``, ``interp atlas`` (a unit per pass and prompt) and ``interp sweep`` (a unit
    per prompt and length, ``KIND`` naming the length) use it. ``actors``: Ray workers
    (``interp.engine.executor.ray_workers``) that scan the unfinished prompts, one prompt per call, while this process
    writes each unit as its call comes back: the units are the same as a local run's, so a run stopped on Ray resumes
    on Ray or locally (and the reverse).

    Returns:
        ``(merged ScanResult of the finished units or None when none finished, Interrupted or None)``; the merge adds
        the units' float64 sums in prompt order, so a resumed run equals an uninterrupted one exactly (on the same
        executor: a Ray worker runs one torch thread, and per-prompt states from another thread count differ at
        float32 rounding).

    Raises:
        InterpError: from the engine (a prompt too long...) or a Ray worker past its retries.
    """
    from tqdm.auto import tqdm

    from interp.engine import ScanResult, merge_results, scan as engine_scan
    from interp.io import write_dir_atomic

    names = [f"{kind}-{pid:05d}" for pid in ids]
    work = dict(zip(names, zip(ids, prompts)))
    t0 = time.perf_counter()

    def compute(todo: list[str]):
        if actors is None:
            for name in todo:
                pid, t = work[name]
                yield name, engine_scan(model, [t], cfg, meta=meta, prompt_ids=[pid], engine=engine,
                                        beyond_context=beyond_context)
            return
        from interp.engine.executor import as_completed

        shard = meta.get("shard", "0/1")
        yield from as_completed([(name, actors[k % len(actors)].scan.remote([work[name][1]], [work[name][0]], cfg, shard,
                                                                             meta, beyond_context))
                                 for k, name in enumerate(todo)])

    bar = tqdm(total=len(names), desc=f"scan {model.card.name}" + (f" ({meta['corpus']})" if "corpus" in meta else ""), unit="prompt")
    try:
        got, stopped = keep_units(run, names, compute, ScanResult.load, lambda path, res: write_dir_atomic(path, res.save), bar)
    finally:
        bar.close()
    parts = list(got.values())
    if not parts:
        return None, stopped
    merged = merge_results(parts)
    merged.meta.update(seconds=sum(r.meta.get("seconds", 0.0) for r in parts), shard=meta.get("shard", "0/1"))
    if actors is not None:
        merged.meta.update(executor="ray", workers=len(actors), seconds=time.perf_counter() - t0)
    merged.meta.pop("merged_from", None)
    merged.meta.pop("shards", None)
    return merged, stopped
