"""Random control sets (``interp.experiments.controls``), the held-out needle split and the multiple-testing helpers
of ``interp.experiments.stats``: the properties the controls of issue 45 rely on, on small cases built here."""

import numpy as np
import pytest
from scipy.stats import false_discovery_control

from interp.errors import ConfigError
from interp.experiments.controls import can_match, draw_interval, layer_difference, layer_pools, matched_draws
from interp.experiments.retrieval import RetrievalConfig, held_out, needle_seeds
from interp.experiments.stats import bh_adjust, difference_interval, permutation_p

LAYERS = np.repeat(np.arange(4), 5)  # 4 layers x 5 heads, rows 0..19


def test_matched_draws_keep_the_layer_histogram_and_never_draw_excluded_heads():
    target = np.array([0, 1, 7, 16])  # layers 0, 0, 1, 3
    exclude = np.zeros(20, bool)
    exclude[[2, 5, 6, 17]] = True  # retrieval heads that are not in the target
    idx = matched_draws(LAYERS, target, exclude, draws=500, seed=3)
    assert idx.shape == (500, 4)
    banned = set(target) | {2, 5, 6, 17}
    assert not banned & set(idx.ravel().tolist())
    for row in idx:
        assert sorted(LAYERS[row]) == sorted(LAYERS[target])  # the same layer histogram
        assert len(set(row)) == 4  # distinct heads without replacement
    # every allowed head of layer 0 ({3, 4}) is drawn: the draw covers the pool, not a fixed subset
    assert set(idx[:, :2].ravel().tolist()) == {3, 4}


def test_matched_draws_pooled_layers_and_errors():
    target = np.array([0, 1, 2, 3])  # four heads of layer 0 of five; excluding one more leaves none to match
    exclude = np.zeros(20, bool)
    exclude[4] = True
    assert not can_match(LAYERS, target, exclude)
    with pytest.raises(ConfigError, match="layer 0 holds 0 heads"):
        matched_draws(LAYERS, target, exclude, draws=2)
    t2 = np.array([0, 1, 2, 10])  # layers 0 (3 heads, 1 other left) and 2 (1 head): pooled over layers 0 and 2
    assert not can_match(LAYERS, t2, exclude) and can_match(LAYERS, t2, exclude, match="layers")
    idx = matched_draws(LAYERS, t2, exclude, draws=200, seed=0, match="layers")
    assert set(idx.ravel().tolist()) == {3, 11, 12, 13, 14}  # the heads of layers 0 and 2 left, nothing else
    assert all(len(set(r)) == 4 for r in idx)
    assert not can_match(LAYERS, np.array([0, 1, 2, 3, 5]), exclude, match="layers")  # 4 left for 5
    # with replacement a layer needs one allowed head
    assert matched_draws(LAYERS, np.array([0, 1, 2]), exclude, draws=50, replace=True).max() == 3
    with pytest.raises(ConfigError, match="match must be"):
        matched_draws(LAYERS, t2, exclude, draws=1, match="model")
    with pytest.raises(ConfigError, match="repeat"):
        layer_pools(LAYERS, [1, 1], exclude)


def test_matched_draws_are_seeded():
    ex = np.zeros(20, bool)
    a = matched_draws(LAYERS, [0, 10], ex, draws=20, seed=5)
    assert (a == matched_draws(LAYERS, [0, 10], ex, draws=20, seed=5)).all()
    assert (a != matched_draws(LAYERS, [0, 10], ex, draws=20, seed=6)).any()


def test_bh_matches_a_hand_computation():
    """p = (0.01, 0.04, 0.03, 0.20), m = 4: sorted 0.01, 0.03, 0.04, 0.20 times m / rank = 0.04, 0.06, 0.0533, 0.20;
    the running minimum from the top gives 0.04, 0.0533, 0.0533, 0.20, back in the input order."""
    p = np.array([0.01, 0.04, 0.03, 0.20, np.nan])
    q = bh_adjust(p)
    assert q[:4] == pytest.approx([0.04, 0.16 / 3, 0.16 / 3, 0.20])
    assert np.isnan(q[4])  # a test not run stays out of the family
    assert q[:4] == pytest.approx(false_discovery_control(p[:4]))


def test_permutation_p_never_zero():
    null = np.array([0.0, 1.0, 2.0, 3.0])
    assert permutation_p(null, 5.0) == (pytest.approx(1 / 5), pytest.approx(1.0))
    assert permutation_p(null, 2.0) == (pytest.approx(3 / 5), pytest.approx(4 / 5))


def test_layer_difference_is_bounded_by_the_layer_sizes():
    """One member among four heads of one layer, the largest value: the difference is (4 - 2) = 2 and a quarter of
    the shuffles put the member on that head, so p cannot fall below about 1/4 (a comparison with random non-members
    alone would give p = 0)."""
    v = np.array([1.0, 2.0, 3.0, 4.0])
    d, null = layer_difference(v, np.zeros(4, int), np.array([False, False, False, True]), draws=4000, seed=0)
    assert d == pytest.approx(2.0)
    p = permutation_p(null, d)[0]
    assert 0.2 < p < 0.3
    # layers where every head or no head is a member do not count
    d2, null2 = layer_difference(np.arange(8.0), np.repeat([0, 1], 4), np.array([1, 1, 1, 1, 0, 1, 0, 0], bool), 100)
    assert d2 == pytest.approx(5.0 - (4 + 6 + 7) / 3) and null2.shape == (100,)  # layer 1 only
    assert np.isnan(layer_difference(v, np.zeros(4, int), np.ones(4, bool), 10)[0])


def test_difference_and_draw_intervals():
    d, lo, hi = difference_interval([1.0, 1.2, 0.8, 1.1], [0.0, 0.1, -0.1, 0.05])
    assert d == pytest.approx(1.025 - 0.0125) and lo < d < hi and lo > 0.5
    m, lo, hi = draw_interval(np.arange(101.0))
    assert (m, lo, hi) == pytest.approx((50.0, 2.5, 97.5))


def test_held_out_needles_are_disjoint_from_the_selection():
    sel = RetrievalConfig(needles=2, seed=0)
    test = held_out(RetrievalConfig(lengths=(256,), needles=2, seed=0), sel)
    assert needle_seeds(sel) == {0, 1} and not needle_seeds(test) & needle_seeds(sel)
    assert test.lengths == (256,)  # only the seeds move
    bigger = held_out(RetrievalConfig(needles=5, seed=1), RetrievalConfig(needles=3, seed=0))
    assert not needle_seeds(bigger) & {0, 1, 2}
    already = RetrievalConfig(needles=2, seed=10)
    assert held_out(already, sel) == already  # disjoint already: unchanged
