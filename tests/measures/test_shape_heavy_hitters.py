"""Heavy-hitter tokens (``interp.measures.heavy_hitters``): the count-min sketch and the key counts equal the same
sums built from materialised attention (``interp.hooks.capture(..., patterns=True)``) with the hash written out
independently; estimates are never below the exact per-id mass and equal it where an id has a bucket of its own;
the top tokens, their text and classes; the class summary."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from interp.engine import ScanConfig, merge_results, scan
from interp.hooks.capture import capture
from interp.measures import heavy_hitters as hh
from tests.conftest import random_tokens

SKIP = 4
P, W, D = 2**31 - 1, 1024, 4
A_ = (1_103_515_245, 1_664_525, 22_695_477, 134_775_813)
B_ = (12_345, 1_013_904_223, 2_531_011, 3_141_592_653 % P)


def _h(r: int, t: int) -> int:
    """Row ``r``'s bucket of id ``t``, in Python integers (independent of the module's tensor code)."""
    return ((A_[r] * t + B_[r]) % P) % W


def _prompts():
    # few distinct ids so ids repeat within and across prompts; newline (10), '.' (46), ' ' (32) among them
    ids = torch.tensor([10, 46, 32, 97, 98, 99, 44, 120])
    return [ids[random_tokens(47, seed=1, vocab=8)], ids[random_tokens(33, seed=2, vocab=8)]]


def _exact(model, prompts):
    """``{id: [layer, head] mass}`` and ``{id: key count}`` over keys >= SKIP, from the materialised patterns."""
    L, H = model.card.n_layers, model.card.n_heads
    mass: dict[int, np.ndarray] = {}
    count: dict[int, int] = {}
    for p in prompts:
        pats = capture(model, p, patterns=True).patterns
        for j in range(SKIP, p.numel()):
            t = int(p[j])
            count[t] = count.get(t, 0) + 1
            m = mass.setdefault(t, np.zeros((L, H)))
            for layer, A in enumerate(pats):
                m[layer] += A.double()[:, :, j].sum(-1).numpy()
    return mass, count


@pytest.fixture(scope="module")
def llama_scan():
    from interp.models import load_model

    model = load_model("tiny-llama", device="cpu")
    prompts = _prompts()
    return model, prompts, scan(model, prompts, ScanConfig(heavy_hitters=True, block_size=8))


def test_sketch_and_counts_equal_materialised_attention(tiny):
    prompts = _prompts()
    res = scan(tiny, prompts, ScanConfig(heavy_hitters=True, block_size=8))
    mass, count = _exact(tiny, prompts)
    L, H = tiny.card.n_layers, tiny.card.n_heads
    want = np.zeros((L, H, D, W))
    for t, m in mass.items():
        for r in range(D):
            want[:, :, r, _h(r, t)] += m
    np.testing.assert_allclose(res.state["hh_sketch"].numpy(), want, atol=1e-5, rtol=1e-6)
    keys = res.state["hh_keys"]
    assert {int(t): int(keys[t]) for t in keys.nonzero().flatten()} == count
    # every sketch row sums to the attention on keys >= SKIP: N - (mass on the sinks) per prompt
    tot = np.sum(list(mass.values()), axis=0)
    np.testing.assert_allclose(res.state["hh_sketch"].sum(-1).numpy(), np.repeat(tot[..., None], D, -1), rtol=1e-6)


def test_estimates_bound_the_exact_mass_and_equal_it_on_a_private_bucket(llama_scan):
    model, prompts, res = llama_scan
    mass, _ = _exact(model, prompts)
    ids = sorted(mass)
    est = hh.estimates(res, torch.tensor(ids)).numpy()
    for c, t in enumerate(ids):
        assert (est[..., c] >= mass[t] - 1e-6).all()
        private = any(all(_h(r, u) != _h(r, t) for u in ids if u != t) for r in range(D))
        if private:
            np.testing.assert_allclose(est[..., c], mass[t], rtol=1e-6, atol=1e-6)
    # the hash as the module computes it equals the written-out one
    assert hh.bucket(torch.tensor(ids)).tolist() == [[_h(r, t) for t in ids] for r in range(D)]


def test_top_tokens_text_class_and_lift(llama_scan):
    model, prompts, res = llama_scan
    mass, count = _exact(model, prompts)
    table = hh.heavy_hitter_tokens(res, model.tokenizer, k=3)
    assert list(table.columns) == ["layer", "head", "rank", "token_id", "token", "class", "share", "key_share", "lift"]
    L, H = model.card.n_layers, model.card.n_heads
    assert len(table) == L * H * 3
    ids = sorted(mass)
    stack = np.stack([mass[t] for t in ids], -1)  # [L, H, n]
    share = stack / stack.sum(-1, keepdims=True)
    n_keys = sum(count.values())
    for row in table.itertuples():
        order = np.argsort(-share[row.layer, row.head])
        assert row.token_id == ids[order[row.rank]]
        assert row.share == pytest.approx(share[row.layer, row.head, order[row.rank]], abs=1e-6)
        assert row.key_share == pytest.approx(count[row.token_id] / n_keys)
        assert row.lift == pytest.approx(row.share / row.key_share)
        assert row.token == model.tokenizer.decode([row.token_id])
    classes = dict(zip(table["token_id"], table["class"]))
    assert classes.get(10, "newline") == "newline" and classes.get(46, "punctuation") == "punctuation"
    assert classes.get(97, "word") == "word" and classes.get(32, "space") == "space"


def test_token_class(tiny_llama):
    tok = tiny_llama.tokenizer
    assert hh.token_class(256, "<bos>", tok) == "BOS"
    assert hh.token_class(257, "<eos>", tok) == "special"
    assert [hh.token_class(0, t) for t in ["\n", " \n", "\r", " ", "", ".", " ,", "+", "()", "a", " the", "a."]] == \
        ["newline", "newline", "newline", "space", "space", "punctuation", "punctuation", "punctuation", "punctuation",
         "word", "word", "word"]


def test_class_summary():
    table = pd.DataFrame({"class": ["newline", "newline", "word", "BOS"], "share": [0.3, 0.1, 0.1, 0.5]})
    s = hh.class_summary(table).set_index("class")
    assert list(s.index) == list(hh.CLASSES)
    assert s.loc["newline", "entries"] == 2 and s.loc["newline", "entry_share"] == 0.5
    assert s.loc["newline", "attention_share"] == pytest.approx(0.4) and s.loc["BOS", "attention_share"] == pytest.approx(0.5)
    assert s.loc["punctuation", "entries"] == 0 and s.loc["punctuation", "attention_share"] == 0
    assert math.isclose(s["entry_share"].sum(), 1) and math.isclose(s["attention_share"].sum(), 1)


def test_shards_add_and_missing_state_says_how_to_get_it(llama_scan):
    model, prompts, res = llama_scan
    cfg = ScanConfig(heavy_hitters=True, block_size=8)
    merged = merge_results([scan(model, prompts[:1], cfg), scan(model, prompts[1:], cfg, prompt_ids=[1])])
    torch.testing.assert_close(merged.state["hh_sketch"], res.state["hh_sketch"], atol=1e-9, rtol=1e-9)
    torch.testing.assert_close(merged.state["hh_keys"], res.state["hh_keys"])
    plain = scan(model, prompts[:1], ScanConfig(block_size=8))
    with pytest.raises(KeyError, match="--measure heavy_hitters"):
        hh.heavy_hitter_tokens(plain)


def test_ranking_by_lift_among_frequent_ids(llama_scan):
    model, prompts, res = llama_scan
    mass, count = _exact(model, prompts)
    n_keys = sum(count.values())
    ids = sorted(t for t in mass if count[t] / n_keys >= 0.13)  # some of the 8 ids are rarer than this
    assert 0 < len(ids) < len(mass)
    table = hh.heavy_hitter_tokens(res, model.tokenizer, k=2, by="lift", min_key_share=0.13)
    stack = np.stack([mass[t] for t in sorted(mass)], -1)
    total = stack.sum(-1)
    for row in table.itertuples():
        lift = np.array([mass[t][row.layer, row.head] / total[row.layer, row.head] / (count[t] / n_keys) for t in ids])
        assert row.token_id == ids[np.argsort(-lift)[row.rank]]
        assert row.lift == pytest.approx(lift.max() if row.rank == 0 else np.sort(lift)[-2], rel=1e-5)
    assert hh.heavy_hitter_tokens(res, k=2, min_key_share=1.01).empty
    with pytest.raises(ValueError, match="by must be"):
        hh.heavy_hitter_tokens(res, by="mass")
