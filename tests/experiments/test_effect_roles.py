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


def test_layer_matched_random_heads():
    eff, atlas = _tables()
    r = role_effects(eff, atlas, roles=("big", "early"), draws=4000, seed=1).set_index(["intervention", "role"])
    big = r.loc[("zero", "big")]
    assert big["heads"] == 3 and big["mean_dnll"] == pytest.approx(0.5)
    # random heads of layers 1..3 have mean (0 + 0.01 + 0.02 + 0.5) / 4 = 0.1325 each
    assert big["random_mean"] == pytest.approx(0.1325, abs=0.01) and big["p_greater"] < 0.05
    early = r.loc[("zero", "early")]
    # a layer-0 head against layer-0 heads: all 1.0, so the role is no different from random heads of its layer
    assert early["mean_dnll"] == early["random_mean"] == 1.0 and early["p_greater"] == 1.0


def test_streaming_auc():
    eff, atlas = _tables()
    assert streaming_auc(eff, atlas) == 1.0  # labelled heads (h < 2) all below the others
    flipped = atlas.assign(role_streaming=~atlas["role_streaming"])
    assert streaming_auc(eff, flipped) == 0.0
    with pytest.raises(ConfigError, match="holds for every head"):
        streaming_auc(eff, atlas.assign(role_streaming=True))
    with pytest.raises(ConfigError, match="no 'streaming' rows"):
        streaming_auc(eff[eff["intervention"] == "zero"], atlas)
