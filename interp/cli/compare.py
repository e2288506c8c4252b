"""``interp compare``: several scan folders side by side (compare.csv, compare.html). Options and outputs: ``interp
compare --help``."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer
from rich.markup import escape

from interp.cli.common import app, check_paths, console, fail, plural, show_table
from interp.errors import InterpError


def _folder_names(dirs: List[Path]) -> list[str]:
    """Distinct names for folders: the last path component, with parents where two folders share it
    (``a/scan``, ``b/scan``), and `` (2)`` for a folder given twice."""
    paths = [Path(d).resolve() for d in dirs]
    names = []
    for p in paths:
        k = 1
        while k < len(p.parts) and any(q != p and q.parts[-k:] == p.parts[-k:] for q in paths):
            k += 1
        names.append("/".join(p.parts[-k:]))
    out: list[str] = []
    for n in names:
        out.append(n if n not in out else f"{n} ({names[: len(out) + 1].count(n)})")
    return out


@app.command()
def compare(dirs: List[Path] = typer.Argument(..., help="output folders of interp scan / merge (each with state/)"),
            out: Path = typer.Option(Path("out/compare"), help="output folder (created; compare.csv and compare.html go in it)"),
            names: Optional[str] = typer.Option(None, help="comma-separated names for the scans, one per folder "
                                                "(default: the folders' names, with parent folders where two are equal)")) -> None:
    """Put several scans side by side: compare.csv (one row per scan, layer, head) and compare.html."""
    check_paths(out, writes="compare.csv, compare.html", scans=dirs, scan_hint="write one with interp scan MODEL --out DIR")
    labels = _folder_names(dirs) if names is None else [n.strip() for n in names.split(",")]
    if len(labels) != len(dirs) or len(set(labels)) != len(labels) or not all(labels):
        fail(InterpError(f"--names needs {len(dirs)} distinct non-empty names, one per folder (e.g. --names "
                          f"{','.join(f'scan{k + 1}' for k in range(len(dirs)))}), got {names!r}"))

    from interp.report.compare import summary, write_compare
    from interp.engine import ScanResult

    try:
        results = [ScanResult.load(d / "state") for d in dirs]
        table = write_compare(results, out, labels)
    except (FileNotFoundError, ValueError, InterpError) as err:
        fail(err)
    s = summary(table)
    show_table(s, "Scans compared", ["model", "heads", "sdh", "sink_rate", "median_r1_q", "median_r1_k", "median_cos_qk_pre"], len(s))
    console.print(f"compared {plural(len(dirs), 'scan')} ({escape(', '.join(labels))}); wrote {out}/compare.csv and {out}/compare.html",
                  soft_wrap=True)
