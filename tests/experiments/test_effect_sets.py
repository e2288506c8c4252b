"""Joint head sets and scored positions (issue 32 part 3): ``set_effects`` equals a hand-hooked reference (the chosen
heads' slices of the output projection's input set to 0 by a plain hook, nothing else), a one-head set equals
``head_effects``; ``score_from`` scores exactly the tokens ``score_from..N-1`` in the fast path and the naive loop;
``greedy_answer`` decodes what ``greedy_decode`` does, and under ``head_intervention(zero)`` what a hand-hooked model
decodes (Wu et al.'s masking zeroes exactly the chosen heads)."""

import numpy as np
import pytest
import torch

from interp.errors import ConfigError
from interp.experiments.effects import EffectsConfig, head_effects, naive_effects, set_effects
from interp.experiments.retrieval import greedy_answer, greedy_decode
from interp.hooks.heads import head_intervention, output_projections, output_width
from tests.conftest import random_tokens


def _prompts(n=2, length=30):
    return torch.stack([random_tokens(length, seed=20 + s) for s in range(n)])


class HandZero:
    """A plain reference: forward pre-hooks that zero the given heads' slices of the output projection's input."""

    def __init__(self, model, heads):
        self.model, self.heads, self.handles = model, heads, []

    def __enter__(self):
        d = output_width(self.model)
        for l, m in enumerate(output_projections(self.model.hf)):
            mine = [h for (x, h) in self.heads if x == l]
            if mine:
                def hook(_m, args, mine=mine):
                    x = args[0].clone()
                    for h in mine:
                        x[..., h * d:(h + 1) * d] = 0
                    return (x,) + args[1:]
                self.handles.append(m.register_forward_pre_hook(hook))
        return self

    def __exit__(self, *exc):
        for h in self.handles:
            h.remove()


def _nll(model, t, start):
    with torch.no_grad():
        lp = torch.log_softmax(model.hf(t[None]).logits[0, start - 1:-1].double(), -1)
    return -lp[torch.arange(lp.shape[0]), t[start:]]


@pytest.mark.parametrize("start", [1, 17])
def test_set_effects_equal_a_hand_hooked_reference(tiny_llama, start):
    P = _prompts()
    sets = [[(0, 1), (1, 2)], [], [(1, 0), (1, 3), (0, 0)]]
    dn, kl, nll = set_effects(tiny_llama, P, sets, "zero", EffectsConfig(score_from=start, batch_rows=2))
    assert dn.shape == kl.shape == (3, 2) and (dn[1] == 0).all() and (kl[1] == 0).all()
    for i, s in enumerate(sets):
        for p, t in enumerate(P):
            clean = _nll(tiny_llama, t, start)
            with HandZero(tiny_llama, s):
                hooked = _nll(tiny_llama, t, start)
            assert nll[p] == pytest.approx(float(clean.mean()), abs=1e-5)
            assert dn[i, p] == pytest.approx(float((hooked - clean).mean()), abs=1e-5)
    assert np.abs(dn).max() > 1e-3  # the sets do change the loss


@pytest.mark.parametrize("kind", ["zero", "streaming"])
def test_a_one_head_set_equals_head_effects(tiny_llama, kind):
    P = _prompts(3, 28)
    cfg = EffectsConfig(interventions=(kind,), sink=1, window=5, bootstrap=0, score_from=9)
    ref = head_effects(tiny_llama, P, cfg)
    heads = list(zip(ref.table["layer"], ref.table["head"]))
    dn, kl, _ = set_effects(tiny_llama, P, [[h] for h in heads], kind, cfg)
    np.testing.assert_allclose(dn, ref.per_prompt["dnll"], atol=1e-5)
    np.testing.assert_allclose(kl, ref.per_prompt["kl"], atol=1e-5)


def test_score_from_scores_only_the_later_tokens(tiny):
    P = _prompts(2, 24)
    cfg = EffectsConfig(interventions=("zero", "streaming"), sink=1, window=4, bootstrap=0, score_from=13)
    fast, slow = head_effects(tiny, P, cfg), naive_effects(tiny, P, cfg)
    np.testing.assert_allclose(fast.per_prompt["dnll"], slow.per_prompt["dnll"], atol=1e-4)
    np.testing.assert_allclose(fast.per_prompt["kl"], slow.per_prompt["kl"], atol=1e-4)
    assert fast.clean_nll == pytest.approx(float(np.mean([_nll(tiny, t, 13).mean() for t in P])), abs=1e-5)
    assert fast.meta["predictions"] == 2 * (24 - 13)
    whole = head_effects(tiny, P, EffectsConfig(interventions=("zero",), bootstrap=0))
    assert not np.allclose(whole.per_prompt["dnll"], fast.per_prompt["dnll"][: len(whole.table)])


def test_score_from_and_sets_are_checked(tiny_llama):
    with pytest.raises(ConfigError, match="score_from"):
        set_effects(tiny_llama, _prompts(1, 10), [[(0, 0)]], "zero", EffectsConfig(score_from=10))
    with pytest.raises(ConfigError, match="outside the model's grid"):
        set_effects(tiny_llama, _prompts(1, 10), [[(9, 0)]], "zero")
    with pytest.raises(ConfigError, match="unknown intervention"):
        set_effects(tiny_llama, _prompts(1, 10), [[(0, 0)]], "erase")


def test_greedy_answer_decodes_what_greedy_decode_does_and_masks_exactly(tiny_llama):
    prompt = random_tokens(40, seed=3)
    ref = greedy_decode(tiny_llama, prompt, 12)
    assert torch.equal(greedy_answer(tiny_llama, prompt, 12), ref.generated)
    heads = [(0, 1), (1, 0), (1, 3)]
    with head_intervention(tiny_llama, heads, "zero"):
        masked = greedy_answer(tiny_llama, prompt, 12)
    with HandZero(tiny_llama, heads):
        hand = greedy_answer(tiny_llama, prompt, 12)
    assert torch.equal(masked, hand) and not torch.equal(masked, ref.generated)
    stop = greedy_answer(tiny_llama, prompt, 12, stop=lambda t: t == int(ref.generated[2]))
    assert torch.equal(stop, ref.generated[:3])


def test_atlas_effects_equal_head_effects_on_the_text_prompts(tiny_llama):
    """``AtlasConfig.effects`` measures every head on the text pass's first prompts, cut to ``effects_tokens``, and joins
    them as columns: the same numbers as ``head_effects`` on those prompts."""
    import interp
    from interp.experiments.atlas import AtlasConfig, run_atlas

    eff = EffectsConfig(interventions=("zero", "streaming"), sink=1, window=8, bootstrap=50)
    res = run_atlas(tiny_llama, AtlasConfig(prompts=3, tokens=40, inp=False, effects=eff, effects_prompts=2, effects_tokens=24))
    ref = head_effects(tiny_llama, interp.corpus.prompts(tiny_llama, "pydoc", 3, 40)[:2, :24], eff).table
    t = res.table.set_index(["layer", "head"])
    for r in ref.itertuples():
        assert t.loc[(r.layer, r.head), f"dnll_{r.intervention}"] == pytest.approx(r.dnll, abs=1e-9)
        assert t.loc[(r.layer, r.head), f"kl_{r.intervention}"] == pytest.approx(r.kl, abs=1e-9)
    assert res.effects.meta["tokens"] == 24 and "effects" in res.seconds
    from interp.report.atlas_page import render_atlas

    page = render_atlas(res, report_link=None)
    assert "What each head does: causal effects" in page and "what it does, streaming: dNLL" in page
