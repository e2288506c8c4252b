"""``interp report``: re-render a scan folder's heads.csv and report.html from its raw state. Options and outputs:
``interp report --help``."""

from __future__ import annotations

from pathlib import Path

import typer

from interp.cli.common import app, check_paths, console, fail
from interp.errors import InterpError


@app.command()
def report(folder: Path = typer.Argument(..., help="an output folder of scan or merge")) -> None:
    """Re-render heads.csv and report.html of a scan folder from its raw state."""
    check_paths(folder, writes="heads.csv, report.html", scans=[folder], scan_hint="write one with interp scan MODEL --out DIR")

    from interp.report.bundle import write_outputs
    from interp.engine import ScanResult

    try:
        result = ScanResult.load(folder / "state")
        ood = ScanResult.load(folder / "ood") if (folder / "ood").exists() else None
    except (FileNotFoundError, InterpError) as err:
        fail(err)
    write_outputs(result, folder, ood)
    console.print(f"wrote {folder}/report.html")
