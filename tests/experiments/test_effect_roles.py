"""Role effects against layer-matched random heads and the streaming AUC, on tables built here with known answers."""

import numpy as np
import pandas as pd
import pytest

from interp.errors import ConfigError
from interp.experiments.effect_roles import role_effects, streaming_auc


def _tables():
    """4 layers x 4 heads; layer 0 heads all have dnll 1.0 (early layers dominate), later heads 0.01 * head, except
    the 'big' role heads (one per later layer, head 3) at 0.5."""
    rows, flags = [], []
    for l in range(4):
        for h in range(4):
            d = 1.0 if l == 0 else (0.5 if h == 3 else 0.01 * h)
            rows.append({"layer": l, "head": h, "intervention": "zero", "dnll": d})
            rows.append({"layer": l, "head": h, "intervention": "streaming", "dnll": 0.001 * h if h < 2 else 0.1 + 0.01 * l})
            flags.append({"layer": l, "head": h, "role_big": l > 0 and h == 3, "role_early": l == 0 and h == 0,
                          "role_streaming": h < 2})
    return pd.DataFrame(rows), pd.DataFrame(flags)


def test_layer_matched_random_heads_without_the_role():
    eff, atlas = _tables()
    r = role_effects(eff, atlas, roles=("big", "early"), draws=4000, seed=1).set_index(["intervention", "role"])
    big = r.loc[("zero", "big")]
    assert big["heads"] == big["heads_compared"] == 3 and big["mean_dnll"] == pytest.approx(0.5)
    # random heads of layers 1..3 without the role: (0 + 0.01 + 0.02) / 3 = 0.01 each, never the role's 0.5
    # (drawn from all heads of the layer, role included, the mean would be 0.1325)
    assert big["random_mean"] == pytest.approx(0.01, abs=0.002) and big["random_hi"] <= 0.02 + 1e-12
    assert big["diff"] == pytest.approx(0.49)
    # membership shuffled within layers: the role sits on each layer's largest head in 1 / 4^3 of the shuffles
    assert big["p_greater"] == pytest.approx(1 / 64, abs=0.006) and big["p_two"] == pytest.approx(1 / 64, abs=0.006)
    early = r.loc[("zero", "early")]
    # a layer-0 head against layer-0 heads: all 1.0, so the role is no different from the other heads of its layer
    assert early["mean_dnll"] == early["random_mean"] == 1.0 and early["diff"] == 0.0 and early["p_two"] == 1.0


def test_roles_of_whole_layers_are_left_out_of_the_comparison():
    eff, atlas = _tables()
    atlas = atlas.assign(role_layer0=atlas["layer"] == 0, role_mixed=(atlas["layer"] == 0) | (atlas["head"] == 3))
    r = role_effects(eff, atlas, roles=("layer0", "mixed"), draws=200).set_index(["intervention", "role"])
    assert r.loc[("zero", "layer0"), "heads"] == 4 and r.loc[("zero", "layer0"), "heads_compared"] == 0
    assert np.isnan(r.loc[("zero", "layer0"), "p_two"])
    mixed = r.loc[("zero", "mixed")]
    assert mixed["heads"] == 7 and mixed["heads_compared"] == 3 and mixed["mean_compared"] == pytest.approx(0.5)


def test_streaming_auc():
    eff, atlas = _tables()
    assert streaming_auc(eff, atlas) == 1.0  # labelled heads (h < 2) all below the others
    flipped = atlas.assign(role_streaming=~atlas["role_streaming"])
    assert streaming_auc(eff, flipped) == 0.0
    with pytest.raises(ConfigError, match="holds for every head"):
        streaming_auc(eff, atlas.assign(role_streaming=True))
    with pytest.raises(ConfigError, match="no 'streaming' rows"):
        streaming_auc(eff[eff["intervention"] == "zero"], atlas)


def test_streaming_auc_is_the_pair_count_with_ties_and_equals_sklearn():
    """A tiny case by hand: labelled heads' dnll {0.1, 0.3, 0.3}, others {0.2, 0.3, 0.5}: of the 9 pairs, a labelled head
    is below an unlabelled one in 5 (0.1 < all three, 0.3 < 0.5 twice) and tied in 2, so AUC = (5 + 0.5 * 2) / 9."""
    from sklearn.metrics import roc_auc_score

    d = [0.1, 0.3, 0.3, 0.2, 0.3, 0.5]
    lab = [True, True, True, False, False, False]
    eff = pd.DataFrame({"layer": 0, "head": range(6), "intervention": "streaming", "dnll": d})
    atlas = pd.DataFrame({"layer": 0, "head": range(6), "role_streaming": lab})
    assert streaming_auc(eff, atlas) == pytest.approx(6 / 9)
    assert streaming_auc(eff, atlas) == pytest.approx(roc_auc_score(lab, -np.array(d)))


def test_youden_threshold_on_a_hand_case():
    from interp.experiments.effect_roles import youden_threshold

    mass = [0.05, 0.1, 0.2, 0.25, 0.4, 0.6]
    streamable = [True, True, True, False, False, False]  # separable at 0.2: J = 1
    assert youden_threshold(mass, streamable) == (0.2, 1.0, 0.0)
    thr, tpr, fpr = youden_threshold([0.05, 0.5, 0.2, 0.25, 0.4, 0.6], streamable)
    assert thr == 0.2 and tpr == pytest.approx(2 / 3) and fpr == 0.0  # J = 2/3 at 0.2 beats J = 1 - 2/3 at 0.5
    with pytest.raises(ConfigError):
        youden_threshold([0.1, 0.2], [True, True])


def test_effect_columns_and_the_atlas_hover():
    """The long effects table becomes one row per head with dnll_<name>, its interval and kl_<name>; the grid's hover
    shows them."""
    from interp.experiments.atlas import effect_columns
    from interp.report.atlas_page import effect_hover

    eff = pd.DataFrame({"layer": [0, 0, 0, 0], "head": [0, 1, 0, 1], "intervention": ["zero", "zero", "streaming", "streaming"],
                        "dnll": [0.1, 0.2, 0.3, 0.4], "dnll_lo": [0.0, 0.1, 0.2, 0.3], "dnll_hi": [0.2, 0.3, 0.4, 0.5],
                        "kl": [1.0, 2.0, 3.0, 4.0]})
    w = effect_columns(eff)
    assert list(w.columns) == ["layer", "head", "dnll_zero", "dnll_zero_lo", "dnll_zero_hi", "kl_zero", "dnll_streaming",
                               "dnll_streaming_lo", "dnll_streaming_hi", "kl_streaming"]
    assert w.loc[w["head"] == 1, "dnll_streaming_hi"].item() == 0.5 and w.loc[w["head"] == 0, "kl_zero"].item() == 1.0
    lines = effect_hover(w.iloc[1].to_dict(), w)
    assert len(lines) == 2 and "zero: dNLL = 0.2 [0.1, 0.3], KL 2" in lines[0]
    with pytest.raises(ConfigError, match="twice"):
        effect_columns(pd.concat([eff, eff]))
    with pytest.raises(ConfigError, match="needs the columns"):
        effect_columns(eff.drop(columns="dnll"))
