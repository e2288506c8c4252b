"""Provenance of the committed tables (issue 21, item 1): ``figures/provenance.json`` names, for every table in
``figures/``, the script that writes it, and for tables written since provenance was recorded the command that reruns
it, the date, the commit and the machine; an analysis run records this for every CSV it writes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import load_script

ROOT = Path(__file__).resolve().parents[1]
FIG = ROOT / "figures"
common = load_script(ROOT / "analyses" / "_common.py")


def test_every_committed_table_has_an_entry_naming_its_script():
    prov = json.loads((FIG / common.PROVENANCE).read_text())
    tables = {p.name for p in FIG.glob("*.csv")}
    assert tables <= set(prov), f"tables with no provenance entry: {sorted(tables - set(prov))}"
    assert set(prov) <= tables, f"entries for tables that are gone: {sorted(set(prov) - tables)}"
    for name, e in prov.items():
        assert (ROOT / e["script"]).is_file(), f"{name}: {e['script']} does not exist"
        assert e["date"] and e["commit"], name
        module = "-m " + e["script"].removesuffix(".py").replace("/", ".")  # runs since issue 49: python -m analyses.GROUP.SCRIPT
        assert e.get("backfilled") or e["command"].startswith((f"python {e['script']}", f"python {module}")), name


def test_record_provenance_adds_the_tables_written_since_the_start_and_keeps_the_others(tmp_path):
    old, new = tmp_path / "old.csv", tmp_path / "new.csv"
    old.write_text("a\n1\n")
    os.utime(old, (1_000_000, 1_000_000))  # written long before the run
    (tmp_path / common.PROVENANCE).write_text(json.dumps({"old.csv": {"script": "x"}}))
    t0 = time.time() - 1
    new.write_text("a\n2\n")
    got = common.record_provenance(tmp_path, t0, str(ROOT / "analyses" / "p003_sparsity/ppc_scratchpad.py"), ["--seeds", "0 1"])
    prov = json.loads((tmp_path / common.PROVENANCE).read_text())
    assert set(got) == {"new.csv"} and prov["old.csv"] == {"script": "x"}
    e = prov["new.csv"]
    assert e["script"] == "analyses/p003_sparsity/ppc_scratchpad.py" and e["command"] == "python -m analyses.p003_sparsity.ppc_scratchpad --seeds '0 1'"
    assert e["machine"].startswith(("Linux", "Darwin", "Windows")) and "torch" in e["machine"] and e["commit"]
    assert common.record_provenance(tmp_path / "gone", t0, "x", []) == {}


def test_a_script_run_records_its_tables(tmp_path):
    subprocess.run([sys.executable, "-m", "analyses.p004_slash.embedding_cone", "--quick", "--out", str(tmp_path)],
                   check=True, capture_output=True, cwd=ROOT)
    prov = json.loads((tmp_path / common.PROVENANCE).read_text())
    assert set(prov) == {p.name for p in tmp_path.glob("*.csv")} and prov
    assert all(e["command"] == f"python -m analyses.p004_slash.embedding_cone --quick --out {tmp_path}" for e in prov.values())


def test_a_merged_table_keeps_the_provenance_of_its_runs(tmp_path):
    """``merge_sources``: a table joined from run folders lists, under ``sources``, each folder's own entry (its
    command and seed), and a folder without provenance as ``command: null``."""
    runs = []
    for k, seed in enumerate((0, 1)):
        d = tmp_path / f"run{k}"
        d.mkdir()
        (d / "copy.csv").write_text("a\n1\n")
        if seed == 0:
            (d / common.PROVENANCE).write_text(json.dumps({"copy.csv": {"command": "python analyses/p000_copy/copy_2d_rope.py --seed 0"}}))
        runs.append(d)
    out = tmp_path / "out"
    out.mkdir()
    t0 = time.time() - 1
    common.merge_sources(["copy.csv", "copy_loss.csv"], runs)
    try:
        (out / "copy.csv").write_text("a\n1\n1\n")
        e = common.record_provenance(out, t0, str(ROOT / "analyses" / "p000_copy/copy_2d_rope.py"), ["--merge-from", *map(str, runs)])["copy.csv"]
    finally:
        common._SOURCES.clear()
    assert e["command"].startswith("python -m analyses.p000_copy.copy_2d_rope --merge-from")
    assert e["sources"] == [{"folder": str(runs[0]), "command": "python analyses/p000_copy/copy_2d_rope.py --seed 0"},
                            {"folder": str(runs[1]), "command": None}]


def test_a_runs_own_tables_do_not_make_its_commit_dirty():
    """``_commit(out)`` ignores changes inside ``out`` (the tables the run just wrote into ``figures/``), but not
    elsewhere: checked against ``git status`` of this checkout."""
    status = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                            text=True).stdout.splitlines()
    outside = [s for s in status if not s[3:].startswith("figures/")]
    assert common._commit(FIG).endswith("+dirty") == bool(outside)
    assert common._commit().endswith("+dirty") == bool(status)


def test_only_the_tables_this_process_wrote_are_credited(tmp_path):
    """Two runs writing into one folder at once (or a ``git merge`` rewriting tables during a run): with the audit hook
    of ``track_outputs``, a run credits only the CSVs it wrote itself (directly or by an atomic rename), not every
    CSV modified since it started."""
    import pandas as pd

    from interp.report.bundle import write_csv

    mod = load_script(ROOT / "analyses" / "_common.py")
    mod.track_outputs(tmp_path, "x", [])  # installs the hook (its exit-time record finds nothing new to credit)
    t0 = time.time() - 1
    pd.DataFrame({"a": [1]}).to_csv(tmp_path / "mine.csv", index=False)
    write_csv(pd.DataFrame({"a": [2]}), tmp_path / "atomic.csv")
    subprocess.run([sys.executable, "-c", f"open({str(tmp_path / 'theirs.csv')!r}, 'w').write('a\\n3\\n')"], check=True)
    got = mod.record_provenance(tmp_path, t0, str(ROOT / "analyses" / "p004_slash" / "band_dose.py"), [])
    assert set(got) == {"mine.csv", "atomic.csv"}
