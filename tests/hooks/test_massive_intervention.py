"""Jin et al.'s destruction (``massive_intervention``): the model restored bitwise, exactly the chosen channels changed
(against a hand computation of the mean), chosen layers only, fixed values, and the scan measures the edited model."""

import sys

import pytest
import torch

import interp
from interp.engine import ScanConfig, scan
from interp.hooks.intervene import massive_intervention
from interp.models.arch import attention_modules
from tests.conftest import random_tokens


def _masks(card):
    q = torch.zeros(card.n_layers, card.n_heads, card.d_head, dtype=torch.bool)
    q[:, 0, -1] = q[:, 0, card.d_head // 2 - 1] = True  # head 0: two channels (the two low-frequency ends)
    q[:, -1, 2] = True
    k = torch.zeros(card.n_layers, card.n_kv_heads, card.d_head, dtype=torch.bool)
    k[:, 0, -2] = True
    return {"q": q, "k": k}


def test_restores_the_model_bitwise(tiny):
    t = random_tokens(33, seed=1)[None]
    rope_fns = {f: sys.modules[f].apply_rotary_pos_emb for f in {type(m).__module__ for m in attention_modules(tiny.hf)}}
    with torch.no_grad():
        before = tiny.hf(t).logits
        with massive_intervention(tiny, _masks(tiny.card)):
            during = tiny.hf(t).logits
        after = tiny.hf(t).logits
    assert (during - before).abs().max() > 1e-4  # it really ran differently
    assert torch.equal(after, before)
    assert all(sys.modules[f].apply_rotary_pos_emb is fn for f, fn in rope_fns.items())
    assert not any(m._forward_pre_hooks or m._forward_hooks for m in attention_modules(tiny.hf))


def test_changes_exactly_the_chosen_channels(tiny):
    """Layer 0's q, k do not depend on earlier edits: the chosen channels hold Jin et al.'s mean (over positions and the
    head's chosen channels), every other entry is bit-identical."""
    t = random_tokens(29, seed=2)
    masks = _masks(tiny.card)
    base = interp.capture(tiny, t)
    with massive_intervention(tiny, masks):
        got = interp.capture(tiny, t)
    for x, name in (("q", "q_rot"), ("k", "k_rot")):
        b, g, m = getattr(base, name)[0], getattr(got, name)[0], masks[x][0]
        want = b.clone()
        for h in range(m.shape[0]):
            if m[h].any():
                want[:, h, m[h]] = b[:, h, m[h]].double().mean().float()  # the repo's mean of per-channel means
        sel = m[None].expand_as(b)
        assert torch.equal(g[~sel], b[~sel])
        torch.testing.assert_close(g[sel], want[sel], rtol=1e-6, atol=1e-6)
        assert not torch.equal(g[sel], b[sel])
    assert torch.equal(got.v[0], base.v[0])  # values untouched


def test_only_chosen_layers_and_fixed_values(tiny):
    t = random_tokens(25, seed=3)
    masks = _masks(tiny.card)
    L, H, K, D = tiny.card.n_layers, tiny.card.n_heads, tiny.card.n_kv_heads, tiny.card.d_head
    values = {"q": torch.full((L, H, D), 0.25), "k": torch.full((L, K, D), -0.5)}
    base = interp.capture(tiny, t)
    with massive_intervention(tiny, masks, values, layers=[1]):
        got = interp.capture(tiny, t)
    assert torch.equal(got.q_rot[0], base.q_rot[0]) and torch.equal(got.k_rot[0], base.k_rot[0])
    assert (got.q_rot[1][:, masks["q"][1]] == 0.25).all() and (got.k_rot[1][:, masks["k"][1]] == -0.5).all()
    # the scan (its own taps) sees the edited queries: the channel sums of layer 1 are value x positions
    with massive_intervention(tiny, masks, values, layers=[1]):
        res = scan(tiny, [t], ScanConfig(massive=True))
    torch.testing.assert_close(res.state["massive_sum_q"][1][masks["q"][1]],
                               torch.full((int(masks["q"][1].sum()),), 0.25 * 25, dtype=torch.float64))


def test_bad_arguments_are_errors(tiny_llama):
    masks = _masks(tiny_llama.card)
    with pytest.raises(ValueError, match="layers must lie in"):
        with massive_intervention(tiny_llama, masks, layers=[99]):
            pass
    with pytest.raises(ValueError, match="must have shape"):
        with massive_intervention(tiny_llama, {"q": masks["q"][:, :1]}):
            pass
