"""Retrieval heads (Wu et al. 2024): decode-time attention equals the materialised pattern; the copy rule on a built case."""

from __future__ import annotations

import math

import pytest
import torch

from interp.attention import attention_pattern
from interp.errors import ConfigError, PromptError, ShapeError
from interp.experiments.retrieval import (RetrievalConfig, _Haystack, build_trial, copy_hits, decode_probs, greedy_decode,
                                          retrieval_table, rouge1_recall, run_retrieval, trial_scores)
from interp.hooks.capture import capture
from tests.conftest import random_tokens


@pytest.mark.parametrize("n_prompt", [1, 20])
def test_decode_attention_equals_the_full_sequence_last_row(tiny, n_prompt):
    """Each step's tapped probabilities (query length 1 against the KV cache; tiny-gemma3's sliding layers keep only
    8 keys) equal the model's own eager pattern of the whole sequence, and the recomputed one, at that query's row."""
    prompt = random_tokens(n_prompt, seed=3)
    steps = 6
    d = greedy_decode(tiny, prompt, steps, top_k=2, keep_probs=True)
    assert d.generated.shape == (steps,) and d.top.shape == (steps, tiny.card.n_layers, tiny.card.n_heads, 2)
    seq = torch.cat([prompt, d.generated[:-1]])
    cap = capture(tiny, seq, patterns=True)
    c = tiny.card
    for s in range(steps):
        pos = n_prompt - 1 + s
        for layer in range(c.n_layers):
            got = d.probs[s][layer]  # [head, pos + 1]
            eager = cap.patterns[layer][:, pos, : pos + 1]
            torch.testing.assert_close(got, eager, atol=1e-5, rtol=1e-4)
            ours = attention_pattern(cap.q_rot[layer], cap.k_rot[layer], c.attn_scale[layer], c.sliding_window[layer], c.softcap)
            torch.testing.assert_close(got, ours[:, pos, : pos + 1], atol=1e-5, rtol=1e-4)
            assert torch.equal(d.top[s, layer, :, 0], eager.argmax(-1))
    # greedy: the model's own continuation of the full sequence
    logits = tiny.hf(seq[None]).logits[0, n_prompt - 1:]
    assert torch.equal(logits.argmax(-1), d.generated)


def test_decode_probs_masks_the_window_and_maps_gqa():
    torch.manual_seed(0)
    q, k = torch.randn(1, 4, 8), torch.randn(5, 2, 8)
    p = decode_probs(q, k, 0.5, window=3)
    assert torch.all(p[:, :2] == 0) and torch.allclose(p.sum(-1), torch.ones(4))
    k_for_head3 = k[:, 1]  # heads 2, 3 read kv head 1
    ref = torch.softmax(0.5 * (k_for_head3[2:] @ q[0, 3]), -1)
    torch.testing.assert_close(p[3, 2:], ref)
    with pytest.raises(ShapeError):
        decode_probs(torch.randn(2, 4, 8), k, 0.5)


def test_copy_rule_on_a_hand_built_case():
    """prompt 10..15, needle span [2, 5) = tokens 12, 13, 14; the model generates 12, 13, 13, 99."""
    prompt = torch.tensor([10, 11, 12, 13, 14, 15, 13])
    span = (2, 5)
    gen = torch.tensor([12, 13, 13, 99])
    # top[step, layer=1, head, k=2]; -1 = no second choice
    top = torch.tensor([
        [[[2, -1], [0, 2], [6, -1]]],   # step 0 (12): head 0 hit; head 1 hit by its 2nd choice; head 2 points outside
        [[[3, -1], [3, 0], [6, -1]]],   # step 1 (13): heads 0, 1 hit (counted once); head 2: token 13 at 6 is outside
        [[[4, -1], [3, 3], [3, -1]]],   # step 2 (13): head 0 points at 14 (no copy); heads 1, 2 hit
        [[[2, -1], [3, -1], [4, -1]]],  # step 3 (99): nothing to copy
    ])
    hits = copy_hits(top, gen, prompt, span)
    assert hits.shape == (4, 1, 3)
    assert hits[:, 0].sum(0).tolist() == [2, 3, 1]
    assert hits[:, 0, 0].tolist() == [True, True, False, False]
    torch.testing.assert_close(trial_scores(hits, span), torch.tensor([[2 / 3, 1.0, 1 / 3]], dtype=torch.float64))
    # top-1 only (the reference's default): head 1's second choices no longer count
    assert copy_hits(top[..., :1], gen, prompt, span)[:, 0].sum(0).tolist() == [2, 2, 1]
    with pytest.raises(ShapeError):
        copy_hits(top, gen, prompt, (5, 9))


def test_scores_average_over_retrieved_trials_only():
    hits = torch.tensor([[[2, 0]], [[4, 1]], [[0, 3]]])  # 3 trials, 1 layer, 2 heads
    t = retrieval_table(hits, torch.tensor([4, 4, 6]), torch.tensor([True, True, False]), n_heads=2, n_kv_heads=1)
    assert t["retrieval_score"].tolist() == [pytest.approx(0.75), pytest.approx(0.125)]
    assert t["retrieval_score_all"].tolist() == [pytest.approx((0.5 + 1.0 + 0) / 3), pytest.approx((0 + 0.25 + 0.5) / 3)]
    assert t["hits"].tolist() == [6, 1] and t["hits_all"].tolist() == [6, 4]
    assert (t["trials_retrieved"] == 2).all() and (t["trials"] == 3).all() and t["kv_head"].tolist() == [0, 0]
    none = retrieval_table(hits, torch.tensor([4, 4, 6]), torch.tensor([False] * 3), n_heads=2, n_kv_heads=1)
    assert none["retrieval_score"].isna().all()


def test_rouge1_recall():
    assert rouge1_recall("candle kettle hammer glacier", "The code is candle, Kettle and hammer!") == 0.75
    assert rouge1_recall("a a b", "a b") == pytest.approx(2 / 3)
    assert rouge1_recall("x", "") == 0.0


def test_trial_places_the_needle_after_a_period(tiny_llama):
    cfg = RetrievalConfig()
    hay = _Haystack(tiny_llama)
    for depth in (0.0, 0.5, 1.0):
        t = build_trial(tiny_llama, hay, 300, depth, 0, cfg)
        assert t.ids.numel() == 300 and t.ids[0] == tiny_llama.bos_token_id
        s, e = t.span
        assert tiny_llama.tokenizer.decode(t.ids[s:e].tolist()) == " " + t.needle.sentence
        if s > 1:
            assert tiny_llama.tokenizer.decode(t.ids[s - 1:s].tolist()) == "."
        assert t.needle_depth <= depth + 1e-9
    with pytest.raises(PromptError, match="no room"):
        build_trial(tiny_llama, hay, 40, 0.5, 0, cfg)


def test_config_is_checked():
    with pytest.raises(ConfigError, match="depths"):
        RetrievalConfig(depths=(0.5, 1.5)).check()
    with pytest.raises(ConfigError, match="context"):
        RetrievalConfig(lengths=(500,)).check(512)
    with pytest.raises(ConfigError, match="template"):
        RetrievalConfig(template="x").check()


def test_run_on_a_tiny_model(tiny_gemma):
    cfg = RetrievalConfig(lengths=(200,), depths=(0.2, 0.8), max_new_tokens=8)
    r = run_retrieval(tiny_gemma, cfg)
    c = tiny_gemma.card
    assert len(r.heads) == c.n_layers * c.n_heads and (r.heads["trials"] == 2).all()
    assert len(r.trials) == 2 and set(r.summary.columns) == {"length", "depth", "rouge1_recall", "retrieved", "trials"}
    assert (r.heads["retrieval_score_all"] >= 0).all() and not math.isnan(r.seconds)
