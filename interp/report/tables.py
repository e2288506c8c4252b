"""Tables derived from a scan for the report and the output folder (long-range lags, content repeats, heavy-hitter
tokens per head).

``long_lag_table`` and ``content_repeats`` are accessors of the slash measure (``interp.measures.slash``),
re-exported here for the report; ``heavy_hitter_cells`` formats ``interp.measures.heavy_hitters.heavy_hitter_tokens``.
"""

from __future__ import annotations

import pandas as pd

from interp.measures.slash import content_repeats, long_lag_table

TOP_LONG_LAGS = 5

__all__ = ["TOP_LONG_LAGS", "content_repeats", "long_lag_table", "heavy_hitter_cells"]


def heavy_hitter_cells(table: pd.DataFrame) -> list[tuple[int, int, list[tuple[str, str]]]]:
    """Per head, in (layer, head) order, its top tokens as ``(label, detail)`` pairs of plain text (not escaped).

    Args:
        table: ``interp.measures.heavy_hitters.heavy_hitter_tokens``' table.

    Returns:
        ``[(layer, head, [(label, detail), ...])]``: ``label`` the token's text between quotes as
        ``interp.report.viewer.display_token`` shows it (``\\n`` visible), or ``id N`` where the text is unknown;
        ``detail`` ``"12.3% x4.0"``: the share of the head's attention on keys other than the sinks, and the lift
        (that share over the share of keys holding the token).
    """
    from interp.report.viewer import display_token

    out = []
    for (layer, head), g in table.sort_values(["layer", "head", "rank"]).groupby(["layer", "head"], sort=False):
        cells = []
        for r in g.itertuples():
            label = f"\u201c{display_token(r.token)}\u201d" if r.token else f"id {r.token_id}"
            cells.append((label, f"{r.share:.1%} x{r.lift:.1f}"))
        out.append((int(layer), int(head), cells))
    return out
