"""The ``analyses/effects`` scripts (issue 32 part 3) in quick mode (tiny-llama, its own small atlas), and their helpers
on hand-built cases: what each table holds, the random sets are drawn as stated, and summaries equal the rows they
summarise."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from tests.conftest import load_script

DIR = Path(__file__).resolve().parents[1] / "analyses" / "effects"


def test_effects_roles_quick_completes_the_effects_table(tmp_path):
    df = load_script(DIR / "effects_roles.py").main(["--quick", "--out", str(tmp_path)])
    t = pd.read_csv(tmp_path / "effects_tiny-llama.csv")
    assert len(t) == 2 * 4 * 2 and set(t["intervention"]) == {"zero", "streaming"}  # tiny-llama: 2 layers x 4 heads
    assert (t["dnll_lo"] <= t["dnll"] + 1e-12).all() and (t["dnll"] <= t["dnll_hi"] + 1e-12).all()
    assert len(df) == 2 * 8 and set(df["role"]) >= {"sdh", "sink", "induction", "retrieval", "streaming", "previous_token"}
    # a second run computes nothing new: the table holds every intervention asked for
    before = (tmp_path / "effects_tiny-llama.csv").stat().st_mtime_ns
    load_script(DIR / "effects_roles.py").main(["--quick", "--out", str(tmp_path)])
    assert (tmp_path / "effects_tiny-llama.csv").stat().st_mtime_ns == before


def test_streaming_sets_and_summary(tmp_path):
    mod = load_script(DIR / "streaming_criterion.py")
    t = pd.DataFrame({"layer": [0, 0, 1, 1], "head": [0, 1, 0, 1], "distant_mass": [0.5, 0.1, 0.3, 0.05],
                      "dnll": [0.0, 0.2, -0.1, 0.3]})
    sets = mod.head_sets(t, [2], draws=3)
    got = {(o, d): s for o, n, d, s in sets}
    assert got[("rule", 0)] == [(1, 1), (0, 1)] and got[("causal", 0)] == [(1, 0), (0, 0)]
    assert all(len(got[("random", d)]) == 2 and len(set(got[("random", d)])) == 2 for d in range(3))
    df = mod.main(["--quick", "--out", str(tmp_path)])
    row = df[df["model"] == "tiny-llama"].iloc[0]
    joint = pd.read_csv(tmp_path / "effects_streaming_joint.csv")
    assert set(joint["order"]) == {"rule", "causal", "random"} and (joint["prompts"] == 2).all()
    summ = pd.read_csv(tmp_path / "effects_streaming_joint_summary.csv")
    for r in summ.itertuples():
        rnd = joint[(joint["order"] == "random") & (joint["n"] == r.n)]["dnll"]
        assert r.draws == len(rnd) == 3 and r.random_mean == pytest.approx(rnd.mean())
        assert r.random_min <= r.random_lo <= r.random_hi <= r.random_max and 0 < r.p_rule_below <= 1
    assert row["heads"] == 8 and 0 <= row["labelled"] <= 8
    assert (tmp_path / "effects_streaming.html").exists()


def test_auc_interval_brackets_the_auc():
    from sklearn.metrics import roc_auc_score

    mod = load_script(DIR / "streaming_criterion.py")
    rng = np.random.default_rng(0)
    y = rng.random(60) < 0.5
    s = y + rng.normal(0, 1, 60)
    lo, hi = mod.auc_interval(y, s)
    assert lo < roc_auc_score(y, s) < hi


def test_retrieval_sets_follow_wu_et_al(tmp_path):
    mod = load_script(DIR / "retrieval_masking.py")
    scores = pd.DataFrame({"layer": [0, 0, 0, 1, 1, 1, 2, 2, 2], "head": [0, 1, 2] * 3,
                           "retrieval_score": [0.05, 0.6, 0.0, np.nan, 0.2, 0.0, 0.1, 0.0, 0.3],
                           "retrieval_score_all": [0, 0, 0, 0.3, 0, 0, 0, 0, 0]})
    ranked, retrieval = mod.ranked_heads(scores)
    pairs = list(zip(ranked["layer"], ranked["head"]))
    assert pairs[:3] == [(0, 1), (2, 2), (1, 1)] and pairs[-1] == (1, 0)  # NaN (never retrieved) last
    assert {p for p, r in zip(pairs, retrieval) if r} == {(0, 1), (2, 2), (1, 1)}  # score > 0.1
    sets, matching = mod.head_sets(ranked, retrieval, [2, 3], draws=20)
    assert sets["none"] == [] and sets["top2"] == [(0, 1), (2, 2)] and matching == {2: "layer", 3: "layer"}
    for d in range(20):
        s = sets[f"random3_{d}"]
        assert not set(s) & {(0, 1), (2, 2), (1, 1)} and len(set(s)) == 3  # never a retrieval head, distinct
        assert sorted(l for l, _ in s) == [0, 1, 2]  # the top 3's layers, one each
    df = mod.main(["--quick", "--out", str(tmp_path)])
    trials = pd.read_csv(tmp_path / "effects_retrieval_masking.csv")
    assert set(trials["kind"]) == {"none", "top", "random"} and len(trials) == (1 + 2 * (1 + 3)) * 2
    assert list(df["k"]) == [1, 2] and (df["split"] == "held_out").all() and (df["draws"] == 3).all()
    assert df["needle_seeds"].astype(str).iloc[0] == "1"  # the selection used needle seed 0
    top1 = trials[trials["set"] == "top1"]["rouge1_recall"].mean()
    assert df.loc[df["k"] == 1, "top"].iloc[0] == pytest.approx(top1)
    per_set = trials[(trials["kind"] == "random") & (trials["k"] == 2)].groupby("draw")["rouge1_recall"].mean()
    assert df.loc[df["k"] == 2, "random_max"].iloc[0] == pytest.approx(per_set.max())


def test_induction_sets_and_second_copy(tmp_path):
    mod = load_script(DIR / "induction_ablation.py")

    class M:
        bos_token_id = 1

    # BOS + r (64) + r (64): the second copy starts at 65, its first inducible prediction is position 66
    assert mod.second_copy_start(M, 129) == 66
    M.bos_token_id = None
    assert mod.second_copy_start(M, 128) == 65
    top = [(3, 1), (3, 4), (5, 0)]
    for s in mod.layer_matched(top, 6, draws=10):
        assert sorted(l for l, _ in s) == [3, 3, 5] and not set(s) & set(top) and len(set(s)) == 3
    df = mod.main(["--quick", "--out", str(tmp_path)])
    sets = pd.read_csv(tmp_path / "effects_induction.csv")
    heads = pd.read_csv(tmp_path / "effects_induction_heads.csv")
    assert len(heads) == 8 and (heads["score_from"] == 18).all()  # tiny-llama has no BOS: ceil(33 / 2) + 1
    top = sets[(sets["kind"] == "top")].iloc[0]
    assert df.iloc[0]["top_dnll"] == pytest.approx(top["dnll"]) and df.iloc[0]["draws"] == 4
    assert df.iloc[0]["top_heads"] == top["heads"]


def test_rope_band_table_agreement():
    mod = load_script(DIR / "rope_band_heads.py")
    heads = pd.DataFrame({"layer": [1, 2], "head": [0, 3], "slash_delta": [1, 0], "slash_score": [0.5, 0.4],
                          "slash_score_wo_high": [0.1, 0.39], "slash_score_wo_medium": [0.4, 0.2], "slash_score_wo_low": [0.5, 0.4]})
    rows = []
    for (l, h), d in {(1, 0): [0.3, 0.1, 0.0, 0.6], (2, 3): [0.2, 0.0, 0.05, 0.4]}.items():
        for name, v in zip(("rope_high", "rope_medium", "rope_low", "zero"), d):
            rows.append({"layer": l, "head": h, "intervention": name, "dnll": v, "dnll_lo": v, "dnll_hi": v, "kl": v})
    t = mod.band_table(heads, pd.DataFrame(rows)).set_index(["layer", "head", "band"])
    assert t.loc[(1, 0, "high"), "ratio"] == pytest.approx(0.2) and t.loc[(1, 0, "high"), "share_of_zero"] == pytest.approx(0.5)
    assert t.loc[(1, 0, "low"), "cf_band"] == "high" and bool(t.loc[(1, 0, "low"), "agree"])  # both name high
    assert t.loc[(2, 3, "low"), "cf_band"] == "medium" and t.loc[(2, 3, "low"), "causal_band"] == "high"
    assert not bool(t.loc[(2, 3, "low"), "agree"])


def test_rope_band_quick(tmp_path):
    df = load_script(DIR / "rope_band_heads.py").main(["--quick", "--out", str(tmp_path)])
    t = pd.read_csv(tmp_path / "effects_rope_band.csv")
    assert len(t) == 2 * 3 * 3 and set(t["band"]) == {"high", "medium", "low"} and t["ratio"].notna().all()
    sdh, ctrl = t[t["group"] == "sdh"], t[t["group"] == "control"]
    assert df.iloc[0]["agree"] == sdh.drop_duplicates(["layer", "head"])["agree"].sum()
    heads = lambda d: set(zip(d["layer"], d["head"]))  # noqa: E731
    assert not heads(sdh) & heads(ctrl) and len(heads(ctrl)) == 3  # the control: other heads
    if df.iloc[0]["matching"] == "layer":
        assert sorted(l for l, _ in heads(sdh)) == sorted(l for l, _ in heads(ctrl))
    hi = sdh[sdh["band"] == "high"]["dnll"].mean() - ctrl[ctrl["band"] == "high"]["dnll"].mean()
    assert df.iloc[0]["diff_high"] == pytest.approx(hi)
    assert df.iloc[0]["diff_high_lo"] <= df.iloc[0]["diff_high"] <= df.iloc[0]["diff_high_hi"]
