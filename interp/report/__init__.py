"""Reports: plotly figures (``figures``) and the self-contained HTML page (``page``)."""

from interp.report.page import write_report

__all__ = ["write_report"]
