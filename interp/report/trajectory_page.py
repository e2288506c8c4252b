"""The trajectory page (``trajectory.html``): every measure of a trajectory against training step, one line per head,
heads coloured by their role at the last step, with the training loss and the in-context-learning score on the same
x axis above them; hover gives the head, step, value and role. One self-contained HTML file (plotly.js inlined; or
from its CDN with ``inline_js=False``, for committed figures).

Input: the table of ``interp.experiments.trajectory`` (one row per ``step, layer, head``: ``ScanResult.heads``
columns plus ``step``, and optionally ``train_loss``, ``icl_score``, ``test_loss``), and optionally the per-step
training losses (``ScanCallback.losses``: columns ``step, loss``). Roles: ``trajectory.final_roles``.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.offline import get_plotlyjs, get_plotlyjs_version
from plotly.subplots import make_subplots

from interp.experiments.trajectory import final_roles
from interp.io import write_text_atomic
from interp.report import html as html_kit

__all__ = ["MEASURES", "ROLE_COLOURS", "trajectory_figure", "render_trajectory", "write_trajectory_page"]

# the measures plotted by default, in order, when the trajectory has them
MEASURES = ("prev_token_score", "induction_score", "duplicate_token_score", "slash_d0", "slash_d1", "slash_d2",
            "sink_weight", "r1_q", "r1_k", "entropy_norm")
ROLE_COLOURS = {"previous-token": "#1f77b4", "induction": "#d62728", "duplicate": "#9467bd", "sink": "#7f7f7f",
                "other": "#bcbd22"}
_SLASH = "#2ca02c"


def _x(steps: pd.Series, log_x: bool) -> np.ndarray:
    s = steps.to_numpy(dtype=float)
    return np.where(s > 0, s, 0.5) if log_x else s


def trajectory_figure(traj: pd.DataFrame, losses: pd.DataFrame | None = None, measures: Sequence[str] | None = None,
                      log_x: bool = True) -> go.Figure:
    """One figure with shared x axis (training step): the loss and ICL score on top, then one panel per measure
    with a line per head (coloured by ``final_roles``).

    Args:
        traj: a trajectory table (module docstring). losses: per-step ``step, loss`` (else ``train_loss`` rows).
        measures: columns to plot (default: those of ``MEASURES`` the table has).
        log_x: logarithmic step axis; step 0 is drawn at 0.5 (the hover shows the true step).

    Raises:
        KeyError: a requested measure that is not a column of ``traj``.
    """
    cols = list(measures) if measures is not None else [m for m in MEASURES if m in traj.columns]
    missing = [c for c in cols if c not in traj.columns]
    if missing:
        raise KeyError(f"the trajectory has no column(s) {', '.join(missing)}; columns: {', '.join(traj.columns)}")
    roles = final_roles(traj)
    fig = make_subplots(rows=len(cols) + 1, cols=1, shared_xaxes=True, vertical_spacing=0.02,
                        subplot_titles=["training loss and ICL score (nats)"] + cols, specs=[[{"secondary_y": True}]] + [[{}]] * len(cols))
    if losses is not None and len(losses):
        fig.add_trace(go.Scatter(x=_x(losses["step"], log_x), y=losses["loss"], mode="lines", name="training loss",
                                 line=dict(color="#444", width=1), customdata=losses["step"],
                                 hovertemplate="step %{customdata}<br>training loss %{y:.4f}<extra></extra>"), row=1, col=1)
    elif "train_loss" in traj:
        per = traj.groupby("step")["train_loss"].first().dropna()
        fig.add_trace(go.Scatter(x=_x(pd.Series(per.index), log_x), y=per.values, mode="lines+markers", name="training loss",
                                 line=dict(color="#444"), customdata=per.index,
                                 hovertemplate="step %{customdata}<br>training loss %{y:.4f}<extra></extra>"), row=1, col=1)
    for extra, colour in (("icl_score", "#ff7f0e"), ("test_loss", "#17becf")):
        if extra in traj:
            per = traj.groupby("step")[extra].first().dropna()
            fig.add_trace(go.Scatter(x=_x(pd.Series(per.index), log_x), y=per.values, mode="lines+markers", name=extra,
                                     line=dict(color=colour), customdata=per.index,
                                     hovertemplate=f"step %{{customdata}}<br>{extra} %{{y:.4f}}<extra></extra>"),
                          row=1, col=1, secondary_y=extra == "icl_score")
    shown: set[str] = set()
    for (layer, head), g in traj.sort_values("step").groupby(["layer", "head"]):
        role = roles.get((int(layer), int(head)), "other")
        colour = ROLE_COLOURS.get(role, _SLASH if role.startswith("slash") else "#bcbd22")
        for r, col in enumerate(cols, start=2):
            fig.add_trace(go.Scatter(x=_x(g["step"], log_x), y=g[col], mode="lines", name=role, legendgroup=role,
                                     showlegend=role not in shown and r == 2, line=dict(color=colour, width=1.3),
                                     customdata=np.stack([g["step"].to_numpy()], -1),
                                     hovertemplate=(f"<b>L{int(layer)}H{int(head)}</b> ({html.escape(role)})<br>step %{{customdata[0]}}"
                                                    f"<br>{html.escape(col)} %{{y:.4f}}<extra></extra>")), row=r, col=1)
        shown.add(role)
    fig.update_xaxes(type="log" if log_x else "linear")
    fig.update_xaxes(title_text="training step" + (" (log; step 0 at 0.5)" if log_x else ""), row=len(cols) + 1, col=1)
    fig.update_layout(height=230 * (len(cols) + 1), hovermode="closest", legend=dict(title="role at the last step"))
    return fig


def render_trajectory(traj: pd.DataFrame, losses: pd.DataFrame | None = None, *, title: str = "",
                      measures: Sequence[str] | None = None, log_x: bool = True, inline_js: bool = True,
                      partial: str | None = None) -> str:
    """The trajectory page as an HTML string (module docstring); ``inline_js=False`` loads plotly.js from its CDN
    instead of inlining it (a page of 0.5 MB instead of 4 MB, for committed figures; it then needs the network);
    ``partial`` (``"K of N checkpoints"``): a banner saying the run was interrupted."""
    steps = sorted(traj["step"].dropna().unique())
    roles = final_roles(traj)
    counts = pd.Series(list(roles.values())).value_counts()
    cost = traj.groupby("step")["scan_seconds"].first().mean() if "scan_seconds" in traj else float("nan")
    parts = [f"<h1>Trajectory{': ' + html.escape(title) if title else ''}</h1>",
             *([f'<p class="note partial"><b>Partial run: {html.escape(partial)}</b> (interrupted; the table holds the '
                "finished checkpoints only; rerun the command with --resume to finish it)</p>"] if partial else []),
             f'<p class="note">{len(steps)} checkpoints (steps {int(steps[0]) if steps else "-"} to {int(steps[-1]) if steps else "-"}), '
             f"{traj[['layer', 'head']].drop_duplicates().shape[0]} heads; one scan of the probe prompts per checkpoint, "
             f"{cost:.2f} s each on average. Roles at the last step (previous-token / induction / duplicate if that "
             f"token-matched score is at least 0.3, else sink, else slash-dominant at a lag, else other): "
             + ", ".join(f"{html.escape(str(k))} {v}" for k, v in counts.items()) + ". ICL score: loss at a late token minus "
             "at an early one (Olsson et al. 2022), right axis of the top panel.</p>",
             html_kit.figure(trajectory_figure(traj, losses, measures, log_x), "trajectory")]
    js = f"<script>{get_plotlyjs()}</script>" if inline_js else f'<script src="https://cdn.plot.ly/plotly-{get_plotlyjs_version()}.min.js"></script>'
    return (f"<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>interp trajectory {html.escape(title)}</title>"
            f"<style>{html_kit.CSS}</style>{js}</head><body>{''.join(parts)}</body></html>")


def write_trajectory_page(traj: pd.DataFrame, path: str | Path, losses: pd.DataFrame | None = None, *, title: str = "",
                          measures: Sequence[str] | None = None, log_x: bool = True, inline_js: bool = True,
                          partial: str | None = None) -> Path:
    """Write :func:`render_trajectory` to ``path`` atomically (temporary file, then rename); returns the path."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    return write_text_atomic(p, render_trajectory(traj, losses, title=title, measures=measures, log_x=log_x, inline_js=inline_js,
                                                partial=partial))
