"""Write a scan's outputs into a folder: tables, report and raw state (each file atomically, ``interp.io``)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from interp.io import write_atomic
from interp.report.page import write_report
from interp.report.tables import content_repeats, long_lag_table
from interp.engine import ScanResult
from interp.measures.slash import add_ood

def write_csv(table: pd.DataFrame, path: str | Path) -> Path:
    """``table.to_csv(path, index=False)``, atomically (``interp.io.write_atomic``: never a half-written table)."""
    return write_atomic(path, lambda tmp: table.to_csv(tmp, index=False))


def write_outputs(result: ScanResult, out: str | Path, ood: ScanResult | None = None, causal: pd.DataFrame | None = None,
                  tokenizer=None, links: dict[str, str] | None = None) -> pd.DataFrame:
    """Write ``heads.csv``, ``long_slash.csv``, ``content_repeats.csv``, ``report.html`` and ``state/`` (and ``ood/``) into ``out``.

    ``causal`` (the summary of ``interp.experiments.ablation.causal_ablation``) is shown in the report's frequencies section;
    ``tokenizer`` decodes the heavy-hitter tokens and ``links`` names related pages (``interp.report.page.render``).
    Returns the head table (with OOD columns when ``ood`` is given).
    """
    d = Path(out)
    d.mkdir(parents=True, exist_ok=True)
    heads = result.heads
    if ood is not None:
        heads = add_ood(heads, ood)
        ood.save(d / "ood")
    result.save(d / "state")
    write_csv(heads, d / "heads.csv")
    write_csv(long_lag_table(result), d / "long_slash.csv")
    write_csv(content_repeats(result, heads), d / "content_repeats.csv")
    write_report(result, d / "report.html", heads, causal=causal, tokenizer=tokenizer, links=links)
    return heads
