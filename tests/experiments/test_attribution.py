"""Attribution patching (``interp.experiments.attribution``): each head's linearised effect equals the derivative of
the exact NLL along the replacement (a finite difference of the model run here in float64 with the head's output moved
by eps toward 0 or its mean), the parameters keep their flags, and the agreement table reads ranks correctly."""

import numpy as np
import pandas as pd
import pytest
import torch

from interp import load_model
from interp.errors import ConfigError
from interp.experiments.attribution import agreement, attribution_effects
from interp.experiments.effects import EffectsConfig
from interp.hooks.heads import head_means, output_projections
from tests.conftest import random_tokens


@pytest.fixture(scope="module")
def llama64():
    m = load_model("tiny-llama", device="cpu")
    m.hf.double()
    return m


def _nll(model, t, layer, h, target, eps):
    """Mean next-token NLL with head ``h``'s output z replaced by z + eps (target - z) (float64)."""
    d = model.card.d_head

    def hook(_m, args):
        x = args[0].clone()
        z = x[..., h * d:(h + 1) * d]
        x[..., h * d:(h + 1) * d] = z + eps * (target.to(x.dtype) - z)
        return (x,)

    hd = output_projections(model.hf)[layer].register_forward_pre_hook(hook)
    try:
        with torch.no_grad():
            logits = model.hf(t[None], use_cache=False).logits[0, :-1]
        return float(torch.nn.functional.cross_entropy(logits, t[1:]))
    finally:
        hd.remove()


def test_attribution_is_the_derivative_of_the_exact_effect(llama64):
    P = torch.stack([random_tokens(25, seed=s) for s in range(2)])
    heads = ((0, 1), (1, 2), (1, 3))
    res = attribution_effects(llama64, P, EffectsConfig(interventions=("zero", "mean"), heads=heads, bootstrap=0))
    means = head_means(llama64, P)
    eps = 1e-3  # central differences: truncation O(eps^2); the tiny model keeps some float32 (RoPE tables), ~1e-7 in NLL
    for r in res.table.itertuples():
        per = []
        for t in P:
            target = torch.zeros(llama64.card.d_head) if r.intervention == "zero" else means[r.layer, r.head]
            per.append((_nll(llama64, t, r.layer, r.head, target, eps) - _nll(llama64, t, r.layer, r.head, target, -eps)) / (2 * eps))
        assert r.dnll == pytest.approx(np.mean(per), rel=2e-3, abs=2e-6), r
    assert np.isnan(res.table["kl"]).all() and res.meta["method"] == "attribution"
    assert all(p.requires_grad for p in llama64.hf.parameters())  # flags restored


def test_only_zero_and_mean_can_be_linearised(tiny_llama):
    with pytest.raises(ConfigError, match="linearises zero and mean only, got streaming"):
        attribution_effects(tiny_llama, random_tokens(10)[None], EffectsConfig(interventions=("zero", "streaming")))


def test_agreement_reads_ranks_and_names_the_worst_heads():
    heads = [(l, h) for l in range(6) for h in range(3)]
    exact = pd.DataFrame({"layer": [l for l, _ in heads], "head": [h for _, h in heads], "intervention": "zero",
                          "dnll": np.linspace(0.01, 1.0, 18)})
    same = exact.copy()
    same["dnll"] = exact["dnll"] ** 3  # monotone: rank correlation 1, linear correlation below 1
    a = agreement(exact, same, n_layers=6).set_index("depth")
    assert a.loc["all", "spearman"] == pytest.approx(1.0) and a.loc["all", "pearson"] < 1.0
    assert a.loc["all", "sign_agree"] == 1.0 and a.loc["early", "heads"] == 6 and a.loc["all_but_layer0", "heads"] == 15
    rev = exact.copy()
    rev["dnll"] = -exact["dnll"]
    b = agreement(exact, rev, n_layers=6).set_index("depth")
    assert b.loc["all", "spearman"] == pytest.approx(-1.0) and b.loc["all", "sign_agree"] == 0.0
    assert b.loc["all", "worst"].split()[0] == "L5H2"  # largest |exact - attribution|: the largest effect, 2 x 1.0


def test_the_mean_reference_comes_from_the_same_forwards(llama64):
    """Without ``means`` the reference is the run's own head outputs, applied after the last prompt (the effect is
    linear in it): the same numbers as with ``head_means`` of the prompts passed in, and as the per-prompt formula."""
    P = torch.stack([random_tokens(20, seed=s) for s in range(3)])
    cfg = EffectsConfig(interventions=("zero", "mean"), bootstrap=0)
    own = attribution_effects(llama64, P, cfg)
    given = attribution_effects(llama64, P, cfg, means=head_means(llama64, P))
    # head_gradients hands z over in float32, head_means sums the float64 model's outputs: float32 rounding apart
    np.testing.assert_allclose(own.table["dnll"], given.table["dnll"], rtol=1e-6, atol=1e-12)
    shifted = attribution_effects(llama64, P, cfg, means=head_means(llama64, P) + 1.0)  # the reference moves the mean rows only
    zero = own.table["intervention"] == "zero"
    np.testing.assert_array_equal(shifted.table["dnll"][zero], own.table["dnll"][zero])
    assert not np.allclose(shifted.table["dnll"][~zero], own.table["dnll"][~zero])
