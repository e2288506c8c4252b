"""``analyses/effects/kv_budget.py`` (issue 48) in quick mode on tiny-llama, and the kv-head helpers of
``interp.experiments.kv_budget`` on hand-built cases: the streamed sets are the lowest-ranked kv heads, the KV cache
saved has its closed form, the exported scores keep the order and put the streamed share below 0.5."""

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from interp.errors import ConfigError
from interp.experiments import kv_budget as kb
from tests.conftest import load_script

DIR = Path(__file__).resolve().parents[1] / "analyses" / "effects"
CARD = SimpleNamespace(n_layers=2, n_heads=4, n_kv_heads=2, sliding_window=[None, 6])


def test_orders_group_query_heads_into_kv_heads():
    t = pd.DataFrame({"layer": [0, 0, 0, 0, 1, 1, 1, 1], "head": [0, 1, 2, 3] * 2,
                      "geo_distant_mass": [0.1, 0.3, 0.5, 0.7, 0.2, 0.2, 0.9, 0.1]})
    s = kb.kv_scores(t, CARD, "geometric")
    assert np.allclose(s, [[0.2, 0.6], [0.2, 0.5]])  # mean over the two query heads of each kv head
    eff = t.assign(intervention="streaming", dnll=t["geo_distant_mass"])
    assert np.allclose(kb.kv_scores(t, CARD, "effects", eff), [[0.4, 1.2], [0.4, 1.0]])  # summed
    assert kb.streamed(s, 0.5) == [(0, 0), (1, 0)]
    assert kb.query_heads([(1, 1)], CARD) == [(1, 2), (1, 3)]
    with pytest.raises(ConfigError, match="unknown order"):
        kb.kv_scores(t, CARD, "magic")
    with pytest.raises(ConfigError, match="needs the streaming rows"):
        kb.kv_scores(t, CARD, "effects")
    with pytest.raises(ConfigError, match="1 of 8 heads"):
        kb.kv_scores(t.iloc[1:], CARD, "geometric")


def test_kv_cache_saved_closed_form():
    """N = 10, S + W = 4: layer 0 holds 10 per kv head, layer 1 (window 6) holds 6; streaming (0, 0) saves 6 and (1, 1)
    saves 2 of the 2 * 10 + 2 * 6 = 32 entries."""
    assert kb.kv_cache_saved(CARD, [(0, 0)], 10, 1, 3) == pytest.approx(6 / 32)
    assert kb.kv_cache_saved(CARD, [(0, 0), (1, 1)], 10, 1, 3) == pytest.approx(8 / 32)
    assert kb.kv_cache_saved(CARD, [], 10, 1, 3) == 0


def test_split_scores_keep_the_order_and_the_share():
    rng = np.random.default_rng(0)
    raw = rng.random((5, 4))
    for share in (0.0, 0.25, 0.5, 0.9, 1.0):
        s = kb.split_scores(raw, share)
        assert s.min() >= 0 and s.max() <= 1
        assert (np.argsort(s.ravel(), kind="stable") == np.argsort(raw.ravel(), kind="stable")).all()
        low = {(int(i // 4), int(i % 4)) for i in np.flatnonzero(s.ravel() < 0.5)}
        assert low == set(kb.streamed(raw, share))


def test_kv_budget_quick(tmp_path):
    mod = load_script(DIR / "kv_budget.py")
    v = mod.main(["--quick", "--out", str(tmp_path)])
    assert list(v["model"]) == ["tiny-llama"]
    heads = pd.read_csv(tmp_path / "kv_budget_heads.csv")
    assert len(heads) == 2 * 4 and heads[["geo_distant_mass", "distant_mass", "kvpress_score", "dnll"]].notna().all().all()
    c = pd.read_csv(tmp_path / "kv_budget_curves.csv")
    assert set(c["order"]) == {"geometric", "effects", "distant_mass", "kvpress", "random"}
    assert set(c["share"]) == set(mod.SHARES)
    zero = c[c["share"] == 0]
    assert (zero["dnll"] == 0).all() and (zero["kv_saved"] == 0).all()
    # tiny-llama: 2 layers x 2 kv heads, full causal; 96 tokens, sink 4 + window 64: a streamed kv head saves 28 of 96
    for r in c.itertuples():
        assert r.kv_saved == pytest.approx(r.kv_heads_streamed / 4 * (96 - 68) / 96)
        assert r.dnll_lo <= r.dnll + 1e-12 <= r.dnll_hi + 2e-12 and r.recall_lo <= r.recall + 1e-12
    assert (tmp_path / "kv_budget_curves.html").exists()
    # each model's column names its loss and needle lengths (they differ between models in the committed run)
    titles = [a.text for a in mod.figure(c).layout.annotations]
    assert titles == ["tiny-llama<br>loss 96 tokens, needles 256 tokens"]
    s = pd.read_csv(tmp_path / "kv_budget_summary.csv").set_index("order")
    assert (s["attention"] == "GQA").all() and (s["duo_streamed_share"] == 0.5).all()
    # the effects order stays inside its own interval at every share, by construction of the criterion
    assert s.loc["effects", "max_share_effects_loss"] == max(mod.SHARES)
    assert s.loc["geometric", "dnll_at_duo"] == pytest.approx(c.query("order == 'geometric' and share == 0.5")["dnll"].iloc[0])
    again = mod.main(["--summary-only", "--out", str(tmp_path)])  # recomputed from the written curves alone
    pd.testing.assert_frame_equal(again.reset_index(drop=True), s.reset_index().reset_index(drop=True)[again.columns])


def test_parts_merge_to_the_whole_run(tmp_path):
    """A loss-only and a NIAH-only run joined with --merge-from give the same curves as one run of both parts."""
    mod = load_script(DIR / "kv_budget.py")
    whole, a, b, c = (tmp_path / n for n in ("whole", "a", "b", "c"))
    mod.main(["--quick", "--out", str(whole)])
    mod.main(["--quick", "--parts", "loss", "--out", str(a)])
    mod.main(["--quick", "--parts", "niah", "--out", str(b)])
    assert pd.read_csv(a / "kv_budget_curves.csv")["recall"].isna().all()
    mod.main(["--merge-from", str(a), str(b), "--out", str(c)])
    keys = ["model", "order", "draw", "share"]
    got = pd.read_csv(c / "kv_budget_curves.csv").sort_values(keys).reset_index(drop=True)
    ref = pd.read_csv(whole / "kv_budget_curves.csv").sort_values(keys).reset_index(drop=True)
    pd.testing.assert_frame_equal(got[ref.columns], ref, check_dtype=False)  # a column with NaN in one part reads as float
    assert (c / "kv_budget_summary.csv").exists()
