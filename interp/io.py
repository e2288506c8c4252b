"""Files on disk: check a path before any work, write results atomically.

- **Checks** (``check_output_dir``, ``check_output_file``, ``check_input_file``, ``check_input_dir``): run before
  a command loads a model, so a bad path costs nothing. Each raises ``PathError`` with one line naming the
  path, the problem (an existing file where a folder is meant, a folder where a file is meant, a path under
  a file, no write permission) and the fix. Nothing is created: a missing output folder is made only when
  the results are written. Write permission is that of this process's effective user (``os.access``), so
  root passes where a read-only mode bit would stop anyone else; a read-only file system stops everyone.
- **Atomic writes** (``write_atomic``, ``write_text_atomic``): the content goes to a temporary file in the
  target's folder, then ``os.replace`` renames it over the target, so an interrupted write (Ctrl-C, a full
  disk, a crash) leaves the previous file or none, never a half-written ``heads.csv`` or report. The
  temporary file is removed when the write fails.

Leaf module: imports only the standard library and ``interp.errors``.
"""

from __future__ import annotations

import functools
import os
import uuid
from pathlib import Path
from typing import Callable

from interp.errors import PathError

__all__ = ["check_output_dir", "check_output_file", "check_input_file", "check_input_dir", "write_atomic", "write_text_atomic",
           "write_dir_atomic"]


def _reachable(check: Callable) -> Callable:
    """A check that meets a folder it may not search (``stat`` raises PermissionError) raises PathError instead."""

    @functools.wraps(check)
    def wrapped(path, *args, **kwargs):
        try:
            return check(path, *args, **kwargs)
        except PermissionError as err:
            what = args[0] if args else kwargs.get("what", "path")
            raise PathError(f"{what} {path}: no permission to reach {err.filename or path}; choose a path you can "
                            f"read and write, or change the folders' permissions") from None

    return wrapped


def _first_existing(path: Path) -> Path:
    """``path`` or its nearest existing ancestor (the folder where a missing path would be created)."""
    p = path.absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def _check_creatable(path: Path, what: str, kind: str) -> None:
    """``path`` does not exist yet: its nearest existing ancestor must be a writable folder."""
    anc = _first_existing(path)
    if not anc.is_dir():
        raise PathError(f"{what} {path}: {anc} is a file, so nothing can be created under it; choose a {kind} path "
                        f"outside {anc} (or remove that file)")
    if not os.access(anc, os.W_OK | os.X_OK):
        raise PathError(f"{what} {path}: no permission to write in {anc}; choose a {kind} in a folder you can write to "
                        f"(e.g. under your home folder) or change the permissions of {anc}")


@_reachable
def check_output_dir(path: str | Path, what: str = "--out") -> Path:
    """Check that ``path`` can serve as an output folder (existing and writable, or creatable); returns it.

    Raises:
        PathError: ``path`` is an existing file, lies under a file, or sits in (or is) a folder without write
            permission.
    """
    p = Path(path)
    if p.exists():
        if not p.is_dir():
            raise PathError(f"{what} {p} is an existing file, but {what} names a folder; choose a folder name "
                            f"(e.g. {p.with_suffix('')}_out) or remove the file")
        if not os.access(p, os.W_OK | os.X_OK):
            raise PathError(f"{what} {p}: no permission to write in {p}; choose a folder you can write to "
                            f"(e.g. under your home folder) or change its permissions")
        return p
    _check_creatable(p, what, "folder")
    return p


@_reachable
def check_output_file(path: str | Path, what: str = "--out") -> Path:
    """Check that ``path`` can be written as a file (it is an existing writable file, or creatable); returns it.

    Raises:
        PathError: ``path`` is an existing folder, lies under a file, or cannot be written for lack of permission.
    """
    p = Path(path)
    if p.is_dir():
        raise PathError(f"{what} {p} is an existing folder, but {what} names a file; give a file name such as "
                        f"{p / 'view.html'}")
    if p.exists():  # replaced by a rename: needs write permission in its folder
        if not os.access(p.absolute().parent, os.W_OK | os.X_OK):
            raise PathError(f"{what} {p}: no permission to write in {p.absolute().parent}; choose a file in a folder you "
                            f"can write to or change the folder's permissions")
        return p
    _check_creatable(p, what, "file")
    return p


@_reachable
def check_input_file(path: str | Path, what: str) -> Path:
    """Check that ``path`` is an existing, readable file; returns it.

    Raises:
        PathError: it does not exist, is a folder, or cannot be read.
    """
    p = Path(path)
    if not p.exists():
        raise PathError(f"{what} {p}: the file does not exist; check the path")
    if p.is_dir():
        raise PathError(f"{what} {p} is a folder; give a file")
    if not os.access(p, os.R_OK):
        raise PathError(f"{what} {p}: no permission to read it; change its permissions or copy it somewhere readable")
    return p


@_reachable
def check_input_dir(path: str | Path, what: str, needs: tuple[str, ...] = (), hint: str = "") -> Path:
    """Check that ``path`` is an existing, readable folder holding every entry of ``needs``; returns it.

    ``hint`` (e.g. "write one with interp scan --out DIR") ends the message when an entry is missing.

    Raises:
        PathError: it does not exist, is a file, cannot be read, or lacks an entry of ``needs``.
    """
    p = Path(path)
    if not p.exists():
        raise PathError(f"{what} {p}: the folder does not exist; check the path")
    if not p.is_dir():
        raise PathError(f"{what} {p} is a file, but a folder is expected" + (f"; {hint}" if hint else ""))
    if not os.access(p, os.R_OK | os.X_OK):
        raise PathError(f"{what} {p}: no permission to read this folder; change its permissions")
    missing = [n for n in needs if not (p / n).exists()]
    if missing:
        raise PathError(f"{what} {p} has no {missing[0]}" + (f"; {hint}" if hint else ""))
    return p


def _fsync(path: Path) -> None:
    """Flush ``path`` (a file or a folder) to the disk: after a crash of the machine, not only of the process, a renamed
    file then has its content, and a rename its folder entry (POSIX; a no-op where folders cannot be opened)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # Windows cannot open a folder
        return
    try:
        os.fsync(fd)
    except OSError:  # some file systems refuse fsync on a folder
        pass
    finally:
        os.close(fd)


def write_atomic(path: str | Path, write: Callable[[Path], object]) -> Path:
    """Write ``path`` atomically: ``write(tmp)`` fills a temporary file in the same folder, which is fsynced, then
    ``os.replace`` and an fsync of the folder (so the new entry survives a power loss too).

    The temporary name keeps the target's suffix (``.heads.<id>.tmp.csv``), so writers that infer a format from
    the suffix behave the same. Parent folders are created. Returns ``path``.

    Raises:
        OSError: the file system refuses the write or the rename (and whatever ``write`` raises); the temporary file
            is removed first.
    """
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.stem}.{uuid.uuid4().hex[:8]}.tmp{p.suffix}")
    try:
        write(tmp)
        _fsync(tmp)
        os.replace(tmp, p)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync(p.parent)
    return p


def write_text_atomic(path: str | Path, text: str, encoding: str = "utf-8") -> Path:
    """``Path(path).write_text(text)``, atomically (``write_atomic``). Returns ``path``."""
    return write_atomic(path, lambda tmp: tmp.write_text(text, encoding=encoding))


def write_dir_atomic(path: str | Path, fill: Callable[[Path], object]) -> Path:
    """Write the folder ``path`` atomically: ``fill(tmp)`` fills a new temporary folder beside it, then a rename.

    A process that dies inside ``fill`` leaves a ``.NAME.<id>.tmp`` folder and no ``path``, so a reader that sees
    ``path`` sees every file ``fill`` wrote (``interp scan --resume`` relies on it: a unit without its folder is
    redone). The files and the folder are fsynced before the rename, the parent after it. An existing ``path`` is
    replaced. Parent folders are created. Returns ``path``.

    Raises:
        OSError: the file system refuses a write or the rename (and whatever ``fill`` raises); the temporary folder is
            removed first.
    """
    import shutil

    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        tmp.mkdir()
        fill(tmp)
        for f in sorted(tmp.rglob("*")):
            _fsync(f)
        _fsync(tmp)
        if p.exists():
            shutil.rmtree(p)
        os.replace(tmp, p)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _fsync(p.parent)
    return p


def write_arrays_atomic(path: str | Path, **arrays) -> Path:
    """Write ``arrays`` (name -> numpy array) as one ``.npz`` file, atomically (``write_atomic``): the unit file of a
    long run (``interp effects`` / ``interp patch --resume``). Returns ``path``."""
    import numpy as np

    def fill(tmp: Path) -> None:
        with open(tmp, "wb") as f:
            np.savez(f, **arrays)

    return write_atomic(path, fill)


def read_arrays(path: str | Path, **shapes: tuple[int, ...]) -> dict | None:
    """The arrays ``shapes`` names from the ``.npz`` file ``path`` (``write_arrays_atomic``), or None when the file is
    missing, unreadable, lacks one of them or holds another shape than ``shapes`` gives (a unit that is then redone)."""
    import numpy as np

    try:
        with np.load(path) as z:
            got = {k: z[k] for k in shapes}
    except (OSError, ValueError, KeyError, EOFError):
        return None
    return got if all(got[k].shape == tuple(s) for k, s in shapes.items()) else None
