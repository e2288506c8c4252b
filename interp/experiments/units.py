"""The finished units of a long run, kept in a folder: one loop for every command that resumes (issue 46).

A *unit* is a piece of work whose result depends only on its name (a prompt's scan state, a retrieval trial, a
checkpoint's rows). ``keep_units`` reads back the units already in the folder, computes the others, writes each
atomically as it finishes and reads it back, so a fresh run merges exactly what a resumed one reads. It lives here,
below both ``interp.cli`` (``interp.cli.longrun.keep_units``: the same loop on a ``RunDir`` with SIGINT / SIGTERM
turned into ``Interrupted``) and the experiments that keep their own units (``run_retrieval``,
``checkpoint_trajectory``), since imports go one way: cli -> experiments.

Imports only ``interp.io`` and ``interp.errors``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterable, Sequence

from interp.errors import CorruptStateError, InterpError
from interp.io import write_atomic

__all__ = ["keep_units", "read_pickle", "write_pickle"]


def read_pickle(path: Path):
    """The object pickled in ``path`` (``pandas.read_pickle``; a unit written by ``write_pickle``).

    Raises:
        CorruptStateError: the file is missing or cannot be unpickled (a unit then redone by ``keep_units``).
    """
    import pandas as pd

    try:
        return pd.read_pickle(path)
    except Exception as err:  # noqa: BLE001 - unpickling fails in many ways (EOFError, UnpicklingError, ...)
        raise CorruptStateError(f"unit {path} cannot be read ({type(err).__name__}: {err})") from None


def write_pickle(path: Path, obj) -> Path:
    """Pickle ``obj`` into ``path`` atomically (``interp.io.write_atomic``; ``pandas.to_pickle``). Returns ``path``."""
    import pandas as pd

    return write_atomic(path, lambda tmp: pd.to_pickle(obj, tmp))


def keep_units(folder: Path | None, names: Sequence[str], compute: Callable[[list[str]], Iterable[tuple[str, object]]],
               load: Callable[[Path], object], save: Callable[[Path, object], object], bar=None,
               stop_on: tuple[type[BaseException], ...] = ()) -> tuple[dict, BaseException | None]:
    """The loop of a long run's units, whoever computes them.

    Each unit of ``names`` already finished in ``folder`` (an entry ``folder / name``) is read back (``load(path)``;
    one that cannot be read, ``OSError`` / ``InterpError``, is redone), then ``compute(todo)`` yields
    ``(name, result)`` for the others in any order (this process in turn, or Ray workers as they finish), and each is
    saved (``save(path, result)``, atomically: a unit whose write was cut off has no entry and is redone) and read
    back. An exception of ``stop_on`` (``interp.cli.longrun.Interrupted``) ends the loop after the last finished unit;
    one raised between a unit's rename and its read-back still counts that unit (it is on disk, as a resumed run
    would find it). ``folder`` None: nothing is read or written, each result is kept as computed. ``bar``: a tqdm
    bar, advanced once per finished unit.

    Returns:
        ``({name: result} of the finished units in ``names``' order, the ``stop_on`` exception or None)``.

    Raises:
        whatever ``compute`` raises outside ``stop_on`` (``InterpError`` from the engine, a Ray call past its retries).
    """
    got: dict = {}
    stopped, pending = None, None

    def advance() -> None:
        if bar is not None:
            bar.update(1)

    try:
        for name in names:
            if folder is not None and (folder / name).exists():
                try:
                    got[name] = load(folder / name)
                except (OSError, InterpError):
                    continue  # a damaged unit is redone
                advance()
        for name, res in compute([n for n in names if n not in got]):
            if folder is None:
                got[name] = res
            else:
                pending = name
                save(folder / name, res)
                got[name] = load(folder / name)
                pending = None
            advance()
    except stop_on as err:
        stopped = err
        try:  # stopped after the unit's rename, before its read-back: the unit is finished, so it counts
            if pending is not None and (folder / pending).exists():
                got[pending] = load(folder / pending)
        except (OSError, InterpError):
            pass
    return {n: got[n] for n in names if n in got}, stopped
