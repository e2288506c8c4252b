"""Every command checks its paths before it loads a model (issue 23): run as a user would, one subprocess per case.

Each case runs ``interp`` in a fresh interpreter in which ``interp.models.load_model`` is replaced by a stub
that prints ``MODEL LOADED`` and exits 99: a command that refuses a bad path with exit code 2 and one line
naming it, without that marker, computed nothing. Nothing may be written either. The no-permission cases
need a user the file modes stop: as root (which ignores them) the command runs as ``nobody`` where that user
can run this Python, else under ``setpriv`` without the capabilities that bypass file modes.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# the CLI with load_model stubbed: whatever reaches it exits 99 and says so
PRELUDE = ("import sys, interp.models as m\n"
           "def _stub(*a, **k):\n    print('MODEL LOADED', flush=True); raise SystemExit(99)\n"
           "m.load_model = _stub\n"
           "from interp.cli import app\n"
           "app(sys.argv[1:], prog_name='interp')\n")


def _env() -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), "COLUMNS": "200",
           "OMP_NUM_THREADS": "1"}
    return env


def _unprivileged() -> tuple[list[str], dict] | None:
    """(command prefix, subprocess kwargs) that run Python as a user whom file modes stop; None if none is possible."""
    if os.geteuid() != 0:
        return [], {}
    probe = [sys.executable, "-c", "pass"]
    try:
        if subprocess.run(probe, user="nobody", capture_output=True, timeout=60).returncode == 0:
            return [], {"user": "nobody", "group": "nogroup" if _has_group("nogroup") else None}
    except (OSError, subprocess.SubprocessError):
        pass
    setpriv = shutil.which("setpriv")
    if setpriv:
        prefix = [setpriv, "--inh-caps=-all", "--bounding-set=-dac_override,-dac_read_search", "--"]
        if subprocess.run(prefix + probe, capture_output=True, timeout=60).returncode == 0:
            return prefix, {}
    return None


def _has_group(name: str) -> bool:
    import grp

    try:
        grp.getgrnam(name)
        return True
    except KeyError:
        return False


def interp(*args: str, unprivileged: bool = False) -> subprocess.CompletedProcess:
    prefix, kwargs = [], {}
    if unprivileged:
        how = _unprivileged()
        if how is None:
            pytest.skip("running as root with no way to drop the permission bypass (no nobody-runnable Python, no setpriv)")
        prefix, kwargs = how
        kwargs = {k: v for k, v in kwargs.items() if v is not None}
    return subprocess.run(prefix + [sys.executable, "-c", PRELUDE, *map(str, args)], capture_output=True, text=True,
                          env=_env(), cwd=ROOT, timeout=300, **kwargs)


def refused(res: subprocess.CompletedProcess, *needles: str) -> str:
    """Exit 2, one line naming the problem, no traceback, the model never loaded; returns the line."""
    out = (res.stdout + res.stderr).strip()
    assert res.returncode == 2, out
    assert "MODEL LOADED" not in out and "Traceback" not in out, out
    assert len(out.splitlines()) == 1, out
    for n in needles:
        assert n in out, (n, out)
    return out


def _make_space() -> Path:
    """A scratch folder every user can enter (pytest's tmp_path is private to root), with a file, a read-only
    folder (with a read-only subfolder) and a read-only scan folder (``state/`` inside)."""
    d = Path(tempfile.mkdtemp(prefix="interp-paths-"))
    d.chmod(0o755)
    (d / "a_file").write_text("x")
    (d / "s" / "state").mkdir(parents=True)  # passes the input check; never read (the checks refuse first)
    (d / "ro_scan" / "state").mkdir(parents=True)
    (d / "readonly" / "existing").mkdir(parents=True)
    for p in (d / "readonly" / "existing", d / "readonly", d / "ro_scan"):
        p.chmod(0o555)
    return d


# name: (arguments with {d} for the scratch folder, unprivileged?)
CASES = {
    "control_scan": (["scan", "tiny-llama", "--tokens", "64", "--out", "{d}/new/scan"], False),
    "scan_out_file": (["scan", "tiny-llama", "--out", "{d}/a_file"], False),
    "scan_out_under_file": (["scan", "tiny-llama", "--out", "{d}/a_file/sub"], False),
    "sweep_out_file": (["sweep", "tiny-llama", "--lengths", "32", "--out", "{d}/a_file"], False),
    "ablate_out_under_file": (["ablate", "tiny-llama", "--out", "{d}/a_file/sub"], False),
    "scan_out_read_only": (["scan", "tiny-llama", "--out", "{d}/readonly/existing"], True),
    "scan_out_under_read_only": (["scan", "tiny-llama", "--out", "{d}/readonly/sub/scan"], True),
    "view_out_folder": (["view", "tiny-llama", "--text", "a b", "--out", "{d}/readonly"], False),
    "view_out_under_file": (["view", "tiny-llama", "--text", "a b", "--out", "{d}/a_file/v.html"], False),
    "view_out_read_only": (["view", "tiny-llama", "--text", "a b", "--out", "{d}/readonly/v.html"], True),
    "view_file_missing": (["view", "tiny-llama", "--file", "{d}/nope.txt", "--out", "{d}/v.html"], False),
    "verify_local_missing": (["verify", "local:{d}/no_model"], False),
    "compare_out_html": (["compare", "{d}/s", "{d}/s", "--out", "{d}/cmp.html"], False),
    "compare_in_missing": (["compare", "{d}/s", "{d}/nowhere", "--out", "{d}/cmp"], False),
    "compare_same_names": (["compare", "{d}/s", "{d}/s", "--names", "a,a", "--out", "{d}/cmp"], False),
    "merge_in_missing": (["merge", "{d}/s0", "--out", "{d}/m"], False),
    "merge_in_not_a_scan": (["merge", "{d}/readonly", "--out", "{d}/m"], False),
    "report_read_only": (["report", "{d}/ro_scan"], True),
}


@pytest.fixture(scope="module")
def runs():
    """Every case of CASES, run concurrently (each a fresh interpreter); ``{name: (scratch, result)}`` and the files after."""
    from concurrent.futures import ThreadPoolExecutor

    d = _make_space()
    before = {str(p) for p in d.rglob("*")}
    try:
        with ThreadPoolExecutor(4) as pool:
            futures = {name: pool.submit(_run_case, [a.format(d=d) for a in args], unpriv) for name, (args, unpriv) in CASES.items()}
            results = {name: f.result() for name, f in futures.items()}
        yield d, results, before, {str(p) for p in d.rglob("*")}
    finally:
        for p in d.rglob("*"):
            if p.is_dir():
                p.chmod(stat.S_IRWXU)
        shutil.rmtree(d, ignore_errors=True)


def _run_case(args: list[str], unprivileged: bool):
    try:
        return interp(*args, unprivileged=unprivileged)
    except pytest.skip.Exception as skip:
        return skip


def _get(runs, name):
    d, results, _, _ = runs
    res = results[name]
    if isinstance(res, pytest.skip.Exception):
        pytest.skip(str(res))
    return d, res


def test_good_paths_reach_the_model(runs):
    """The control: with valid paths the command gets as far as loading the model (the stub)."""
    _, res = _get(runs, "control_scan")
    assert res.returncode == 99 and "MODEL LOADED" in res.stdout, res.stdout + res.stderr


def test_nothing_is_written_by_a_refused_command(runs):
    d, _, before, after = runs
    assert after == before  # no output folder, no cmp.html/ or cmp/ folder, nothing in the read-only folders


@pytest.mark.parametrize("name", ["scan_out_file", "sweep_out_file"])
def test_folder_outputs_refuse_an_existing_file(runs, name):
    d, res = _get(runs, name)
    refused(res, f"{d}/a_file", "is an existing file", "names a folder")


@pytest.mark.parametrize("name", ["scan_out_under_file", "ablate_out_under_file", "view_out_under_file"])
def test_outputs_under_a_file_are_refused(runs, name):
    d, res = _get(runs, name)
    refused(res, f"{d}/a_file is a file", "nothing can be created under it")


@pytest.mark.parametrize("name,where", [("scan_out_read_only", "readonly/existing"), ("scan_out_under_read_only", "readonly"),
                                        ("view_out_read_only", "readonly"), ("report_read_only", "ro_scan")])
def test_read_only_folders_are_refused(runs, name, where):
    d, res = _get(runs, name)
    refused(res, f"no permission to write in {d}/{where}")


def test_view_out_is_a_file(runs):
    d, res = _get(runs, "view_out_folder")
    refused(res, f"{d}/readonly is an existing folder", "names a file", "view.html")


def test_missing_inputs_say_they_do_not_exist(runs):
    d, res = _get(runs, "view_file_missing")
    assert "UTF-8" not in refused(res, f"--file {d}/nope.txt: the file does not exist")
    refused(_get(runs, "verify_local_missing")[1], f"{d}/no_model: the folder does not exist")
    refused(_get(runs, "compare_in_missing")[1], f"{d}/nowhere: the folder does not exist")
    refused(_get(runs, "merge_in_missing")[1], f"{d}/s0: the folder does not exist")
    refused(_get(runs, "merge_in_not_a_scan")[1], f"{d}/readonly has no state", "--shard")


def test_compare_out_is_a_folder_and_names_are_checked_first(runs):
    d, res = _get(runs, "compare_out_html")
    refused(res, f"--out {d}/cmp.html looks like a file name", "names a folder", f"such as {d}/cmp")
    line = refused(_get(runs, "compare_same_names")[1], "--names", "distinct")
    assert "'a,a'" in line
