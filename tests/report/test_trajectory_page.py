"""The trajectory page (interp.report.trajectory_page): a line per head and measure on the step axis, heads coloured by
their role at the last step, loss and ICL score on the same axis, numbers on hover."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from interp.experiments.trajectory import final_roles
from interp.report.trajectory_page import ROLE_COLOURS, render_trajectory, trajectory_figure, write_trajectory_page


def _traj() -> pd.DataFrame:
    rows = []
    for step in (0, 10, 100):
        grow = step / 100
        for layer in range(2):
            for head in range(2):
                ind = 0.6 * grow if (layer, head) == (1, 0) else 0.01
                prev = 0.8 * grow if (layer, head) == (0, 1) else 0.05
                rows.append({"step": step, "layer": layer, "head": head, "train_loss": 3 - grow, "icl_score": -grow,
                             "prev_token_score": prev, "induction_score": ind, "duplicate_token_score": 0.0,
                             "slash_d1": prev, "sink_weight": 0.1, "has_sink": False, "is_sdh": False, "slash_score": 0.05,
                             "slash_delta": 0, "scan_seconds": 0.5})
    return pd.DataFrame(rows)


def test_roles_come_from_the_last_step():
    roles = final_roles(_traj())
    assert roles[(1, 0)] == "induction" and roles[(0, 1)] == "previous-token" and roles[(0, 0)] == "other"


def test_figure_has_a_line_per_head_and_measure_coloured_by_role():
    t = _traj()
    fig = trajectory_figure(t, measures=["induction_score", "prev_token_score"])
    heads = [tr for tr in fig.data if tr.hovertemplate and "<b>L" in tr.hovertemplate]
    assert len(heads) == 4 * 2
    ind = [tr for tr in heads if "L1H0" in tr.hovertemplate and "induction_score" in tr.hovertemplate][0]
    assert ind.line.color == ROLE_COLOURS["induction"] and np.allclose(ind.y, [0, 0.06, 0.6])
    assert list(ind.x) == [0.5, 10, 100]  # log axis: step 0 drawn at 0.5, the hover keeps the true step
    assert [int(c[0]) for c in ind.customdata] == [0, 10, 100]
    top = [tr.name for tr in fig.data if tr.name in ("training loss", "icl_score")]
    assert top == ["training loss", "icl_score"]
    with pytest.raises(KeyError, match="no column"):
        trajectory_figure(t, measures=["nope"])


def test_page_is_self_contained(tmp_path):
    p = write_trajectory_page(_traj(), tmp_path / "t.html", losses=pd.DataFrame({"step": [1, 2], "loss": [3.0, 2.9]}), title="toy")
    text = p.read_text()
    assert "<script>" in text and "<script src=" not in text and "3 checkpoints" in text and "induction 1" in text
    assert "Trajectory: toy" in render_trajectory(_traj(), title="toy")
