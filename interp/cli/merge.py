"""``interp merge``: combine the shards of ``interp scan --shard`` (sums add exactly) into one scan folder. Options and
outputs: ``interp merge --help``."""

from __future__ import annotations

from pathlib import Path
from typing import List

import typer

from interp.cli.common import app, check_paths, console, fail, long_summary, plural, top_sdh
from interp.errors import InterpError


def _distinct_prompts(dirs: List[Path], results) -> None:
    """Refuse folders that hold the same prompt (a shard given twice would be counted twice), naming both folders."""
    seen: dict[int, int] = {}
    for k, r in enumerate(results):
        for pid in r.meta.get("prompt_ids", []):
            if pid in seen:
                j = seen[pid]
                raise InterpError(f"prompt {pid} is in both {dirs[j]} (shard {results[j].meta.get('shard', '?')}) and {dirs[k]} "
                                  f"(shard {r.meta.get('shard', '?')}): merging would count it twice; give each shard's folder once")
            seen[pid] = k


@app.command()
def merge(dirs: List[Path] = typer.Argument(..., help="shard folders written by scan --shard"),
          out: Path = typer.Option(Path("out/merged"), help="output folder (created; heads.csv, report.html, state/ go in it)")) -> None:
    """Combine shards (sums add exactly) and write the finalised tables and report."""
    check_paths(out, writes="heads.csv, report.html, state/", scans=dirs,
                 scan_hint="write shards with interp scan MODEL --shard I/N --out DIR")

    from interp.report.bundle import write_outputs
    from interp.engine import ScanResult, merge_results

    try:
        shards = [ScanResult.load(d / "state") for d in dirs]
        _distinct_prompts(dirs, shards)
        result = merge_results(shards)
        oods = [d / "ood" for d in dirs if (d / "ood").exists()]
        ood = merge_results([ScanResult.load(d) for d in oods]) if len(oods) == len(dirs) else None
    except (FileNotFoundError, ValueError, InterpError) as err:
        fail(err)
    heads = write_outputs(result, out, ood)
    top_sdh(heads, 15)
    long_summary(heads, result)
    console.print(f"merged {plural(len(dirs), 'shard')} ({plural(result.meta['prompts'], 'prompt')}) into {out}")
