"""analyses/p004_slash/ood_ratio.py (paper 004 Fig. 3b): SDH rows, the prompt bootstrap, per-prompt scans, and the quick mode."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import interp
from tests.conftest import load_script

SCRIPT = Path(__file__).resolve().parents[1] / "analyses" / "p004_slash/ood_ratio.py"


@pytest.fixture(scope="module")
def mod():
    return load_script(SCRIPT)


def test_sdh_rows_are_every_lag_at_or_above_kappa(mod):
    sid = np.zeros((2, 3, 5))
    sid[0, 1, 0], sid[0, 1, 2], sid[1, 2, 4], sid[1, 0, 3] = 0.9, 0.1, 0.25, 0.0999
    sood = sid * 0.5 + 0.01
    rows = mod.sdh_rows(sid, sood, 0.1)
    assert rows[["layer", "head", "delta"]].values.tolist() == [[0, 1, 0], [0, 1, 2], [1, 2, 4]]
    assert np.allclose(rows.ratio, (sid[sid >= 0.1] * 0.5 + 0.01) / sid[sid >= 0.1])


def test_bootstrap_of_a_constant_ratio_is_degenerate_and_shares_follow_the_thresholds(mod):
    rng = np.random.default_rng(0)
    per_id = np.repeat(rng.uniform(0.1, 1.0, (1, 2, 3, 5)), 6, 0)  # every prompt alike, OOD = 2 x ID: ratio 2 in every resample
    rows = mod.sdh_rows(per_id.mean(0), 2 * per_id.mean(0))
    boot = mod.bootstrap_shares(per_id, 2 * per_id, rows, 50, 0)
    assert np.all(boot == 1.0)
    noisy = per_id * rng.uniform(0.5, 1.5, per_id.shape)  # prompts differ: the resampled shares vary, within [0, 1]
    b2 = mod.bootstrap_shares(noisy, noisy[::-1], mod.sdh_rows(noisy.mean(0), noisy.mean(0)), 200, 0)
    assert b2.min() >= 0 and b2.max() <= 1 and b2[:, 1].std() > 0
    s = mod.summarise(rows.assign(ratio=np.r_[np.full(len(rows) - 3, 0.4), 0.6, 1.2, 3.0]), boot)
    assert s["share_gt_05"] == pytest.approx(3 / len(rows)) and s["share_gt_1"] == pytest.approx(2 / len(rows))


def test_per_prompt_scores_average_to_the_scan_of_all_prompts(mod):
    model = interp.load_model("tiny-llama", device="cpu")
    p = interp.corpus.prompts(model, "random", 3, 40, seed=1)
    per, merged = mod.per_prompt_scores(model, p, interp.ScanConfig(counterfactual_sinks=False))
    whole = interp.scan(model, p, interp.ScanConfig(counterfactual_sinks=False)).scores[..., :5].numpy()
    assert per.shape == (3, model.card.n_layers, model.card.n_heads, 5)
    assert np.allclose(per.mean(0), whole, atol=1e-10) and np.allclose(merged.scores[..., :5].numpy(), whole, atol=1e-10)


def test_paper_table_ratios(mod):
    paper = mod.paper_table()
    assert len(paper) == 38 and set(paper.model) == {"Gemma-7B", "Llama3-8B-Instruct", "Qwen2.5-7B-Instruct"}
    assert (paper.slash_id >= 0.1).all() and paper.delta.between(0, 4).all()


def test_quick_ood_ratio(tmp_path, mod):
    df = mod.main(["--quick", "--out", str(tmp_path)])
    assert list(df.columns) == ["model", "layer", "head", "delta", "slash_id", "slash_ood", "ratio"]
    assert len(df) and (df.slash_id >= 0.02).all() and np.allclose(df.ratio, df.slash_ood / df.slash_id)
    s = pd.read_csv(tmp_path / "ood_ratio_summary.csv")
    ours = s[s.source == "ours"].iloc[0]
    assert ours.n_sdh == len(df) and ours.share_gt_05_lo <= ours.share_gt_05 <= ours.share_gt_05_hi
    assert (tmp_path / "ood_ratio.html").exists() and (tmp_path / "ood_ratio_paper004.csv").exists()
