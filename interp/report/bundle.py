"""Write a scan's outputs into a folder: tables, report and raw state."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from interp.report.page import write_report
from interp.scan import ScanResult, add_ood

TOP_LONG_LAGS = 5


def long_lag_table(result: ScanResult, top: int = TOP_LONG_LAGS) -> pd.DataFrame:
    """Top ``top`` long lags per head: ``layer, head, rank, delta, slash_score, is_sdh_long`` (empty if prompts are short)."""
    lags = result.long_lag_range()
    if not lags:
        return pd.DataFrame(columns=["layer", "head", "rank", "delta", "slash_score", "is_sdh_long"])
    lo = lags.start
    window = result.scores[..., lo : lags.stop].nan_to_num(nan=-1.0)
    k = min(top, window.shape[-1])
    val, idx = window.topk(k, dim=-1)
    L, H = val.shape[:2]
    rows = [
        (l, h, r + 1, int(idx[l, h, r]) + lo, float(val[l, h, r]), float(val[l, h, r]) >= result.config.kappa_long)
        for l in range(L) for h in range(H) for r in range(k) if val[l, h, r] >= 0
    ]
    return pd.DataFrame(rows, columns=["layer", "head", "rank", "delta", "slash_score", "is_sdh_long"])


def write_outputs(result: ScanResult, out: str | Path, ood: ScanResult | None = None) -> pd.DataFrame:
    """Write ``heads.csv``, ``long_slash.csv``, ``report.html`` and ``state/`` (and ``ood/``) into ``out``.

    Returns the head table (with OOD columns when ``ood`` is given).
    """
    d = Path(out)
    d.mkdir(parents=True, exist_ok=True)
    heads = result.heads
    if ood is not None:
        heads = add_ood(heads, ood)
        ood.save(d / "ood")
    result.save(d / "state")
    heads.to_csv(d / "heads.csv", index=False)
    long_lag_table(result).to_csv(d / "long_slash.csv", index=False)
    write_report(result, d / "report.html", heads)
    return heads
