"""Paper 002's Dyck words and closed-form completers: exact sampler, the 4,000 deep words, Thm 4.1 / Claim 5.3 on every
prefix, the lab-model versions of both heads, the counting-head detector and the analysis script's quick mode."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from scipy.stats import chisquare

import interp
from interp.lab import counting, dyck, lab_loaded
from interp.lab import dyck_closed_form as cf
from tests.conftest import load_script

N = 32
ROOT = Path(__file__).resolve().parents[2] / "analyses"


def brute_force(n: int) -> np.ndarray:
    """All balanced words of length n by filtering the 2^n strings, in lexicographic order ('(' = 0 < ')' = 1)."""
    allw = np.array(list(itertools.product((0, 1), repeat=n)), dtype=np.uint8)
    return allw[dyck.is_balanced(allw)]


@pytest.fixture(scope="module")
def deep():
    return dyck.enumerate_words(N, range(13, N // 2 + 1))


@pytest.fixture(scope="module")
def deep_prefixes(deep):
    return dyck.all_prefixes(deep)  # every prefix length 1..31 of every deep word: 124,000 prefixes


def training_words():
    """Thm 4.1's single training word: a real depth-4 word of D_32 (README slip list), plus the two extremes."""
    s4 = dyck.sample(N, [4], 1, np.random.default_rng(0))[0]
    assert dyck.depth(s4[None])[0] == 4
    return [s4, dyck.to_codes(["()" * 16])[0], dyck.to_codes(["(" * 16 + ")" * 16])[0]]


@pytest.mark.parametrize("n", [2, 4, 6, 8, 10, 12, 14])
def test_counts_and_enumeration_match_brute_force(n):
    ref = brute_force(n)
    assert len(ref) == math.comb(n, n // 2) // (n // 2 + 1) == dyck.count(n)  # Catalan number
    np.testing.assert_array_equal(dyck.count_by_depth(n), np.bincount(dyck.depth(ref), minlength=n // 2 + 1))
    for depths in ([1], [2, 3], range(3, n // 2 + 1), None):
        want = ref if depths is None else ref[np.isin(dyck.depth(ref), list(depths))]
        np.testing.assert_array_equal(dyck.enumerate_words(n, depths), want)  # same words, same (lexicographic) order


def test_sampler_is_uniform_over_the_depth_set():
    n, depths = 12, [3, 4]
    words = dyck.enumerate_words(n, depths)                 # 100 words (brute-force checked above)
    got = dyck.sample(n, depths, 50 * len(words), np.random.default_rng(1))
    assert np.isin(dyck.depth(got), depths).all() and dyck.is_balanced(got).all()
    idx = {w.tobytes(): i for i, w in enumerate(words)}
    freq = np.bincount([idx[w.tobytes()] for w in got], minlength=len(words))
    assert (freq > 0).all()
    assert chisquare(freq).pvalue > 1e-3                    # uniform: 50 expected per word
    d = dyck.sample(n, depths, len(words), np.random.default_rng(2), distinct=True)
    assert len({w.tobytes() for w in d}) == len(words)      # without replacement: every word once


def test_sampler_depth_mix_at_length_32():
    """Words of depth <= 8 drawn uniformly: their depths follow the exact counts (chi-square on 20,000 draws)."""
    got = dyck.depth(dyck.sample(N, range(1, 9), 20_000, np.random.default_rng(3)))
    cnt = dyck.count_by_depth(N)[2:9]                        # depth 1 has a single word: merged into depth 2
    obs = np.bincount(got, minlength=9)[1:9]
    obs = np.concatenate([[obs[0] + obs[1]], obs[2:]])
    exp = np.concatenate([[cnt[0] + dyck.count_by_depth(N)[1]], cnt[1:]]) / dyck.count(N, range(1, 9)) * 20_000
    assert chisquare(obs, exp).pvalue > 1e-3


def test_counts_of_d32(deep):
    assert dyck.count(N) == 35_357_670
    assert dyck.count(N, range(13, 17)) == 4_000 == len(deep)
    assert dyck.count(N, range(1, 9)) == 33_602_822 and dyck.count(N, range(9, 17)) == 35_357_670 - 33_602_822
    assert len({w.tobytes() for w in deep}) == 4_000
    assert dyck.is_balanced(deep).all() and (dyck.depth(deep) >= 13).all()


def test_cut_at_first_maximum(deep):
    codes, lens = dyck.cut_at_max(deep)
    h = dyck.heights(codes)
    top = h[np.arange(len(lens)), lens - 1]
    np.testing.assert_array_equal(top, dyck.depth(deep))               # the prefix ends at the word's depth
    before = np.where(np.arange(N)[None] < lens[:, None] - 1, h, -1)
    assert (before.max(1) < top).all()                                  # and reaches it there for the first time
    u, ul = dyck.unique_prefixes(codes, lens)
    assert len(u) == len({dyck.to_strings(c[None, :k])[0] for c, k in zip(codes, lens)}) < 4_000


def test_bad_input_raises():
    with pytest.raises(ValueError):
        dyck.count(31)
    with pytest.raises(ValueError):
        dyck.unrank([4_000], N, range(13, 17))
    with pytest.raises(ValueError):
        dyck.to_codes(["(x"])
    with pytest.raises(ValueError):
        dyck.complete(cf.claim53_policy(N), np.zeros((2, N), np.uint8), np.array([0, 3]))
    with pytest.raises(ValueError):
        cf.thm41_positions([0, 1, 1])


@pytest.mark.parametrize("k", range(3))
def test_thm41_completes_every_prefix_of_every_deep_word(k, deep_prefixes):
    """002 Thm 4.1 (generalisation): gamma = -1/2, v < -2N^2: greedy completion of all 124,000 prefixes is balanced;
    (memorisation) every prefix of s is completed into s."""
    s = training_words()[k]
    done = dyck.complete(cf.thm41_policy(s), *deep_prefixes)
    assert dyck.is_balanced(done).all()
    mem = dyck.complete(cf.thm41_policy(s), *dyck.all_prefixes(s[None]))
    assert (mem == s).all()


def test_thm41_converse_repulsive(deep_prefixes):
    """Thm 4.1's converse: gamma > 0 (v gamma > N^2) fails on every prefix whose stack differs from s's, and memorises s."""
    s = training_words()[0]
    pol = cf.thm41_policy(s, v=-cf.thm41_v(N), gamma=0.5)
    codes, lens = deep_prefixes
    gap = cf.stack_gap(codes, s)[np.arange(len(lens)), lens - 1]
    ok = dyck.is_balanced(dyck.complete(pol, codes, lens))
    assert (gap != 0).sum() > 50_000 and not ok[gap != 0].any()
    assert (dyck.complete(pol, *dyck.all_prefixes(s[None])) == s).all()


def test_claim53_completes_every_prefix(deep_prefixes):
    """002 Claim 5.3: no positions, E = [1 - 1/(2N+1), -1]: close while the stack is open, then '()' repeated."""
    codes, lens = deep_prefixes
    done = dyck.complete(cf.claim53_policy(N), codes, lens)
    assert dyck.is_balanced(done).all()
    h = dyck.heights(done)
    after = np.arange(N)[None] >= lens[:, None]
    top = h[np.arange(len(lens)), lens - 1]
    # after the prefix, the height falls by one per step to 0 and then alternates 1, 0, 1, 0 ...
    steps_since = np.arange(N)[None] - (lens[:, None] - 1)
    want = np.where(steps_since <= top[:, None], top[:, None] - steps_since, (steps_since - top[:, None]) % 2)
    assert (h[after] == want[after]).all()


def test_sampled_decoding_of_closed_forms(deep):
    """Sampling at temperature 1: each step errs with probability <= exp(-2|X|) <= exp(-N/2) here (|X| >= 8.2 for
    Thm 4.1, >= 256 for Claim 5.3); over the 4,000 cut prefixes (< 20 steps each) the expected number of failures
    is below 0.01, so at most one failure is allowed."""
    codes, lens = dyck.cut_at_max(deep)
    for pol in (cf.thm41_policy(training_words()[0]), cf.claim53_policy(N)):
        done = dyck.complete(pol, codes, lens, greedy=False, generator=torch.Generator().manual_seed(0))
        assert (~dyck.is_balanced(done)).sum() <= 1


@pytest.mark.parametrize("which", ["thm41", "claim53"])
def test_lab_model_heads_equal_the_closed_forms(which, deep_prefixes):
    """The LabForCausalLM weights decide like the plain closed form at every prefix the plain greedy completions
    visit (so their greedy completions of all 124,000 prefixes coincide), with uniform attention interp can verify."""
    s = training_words()[0]
    model, plain = (cf.thm41_model(s), cf.thm41_policy(s)) if which == "thm41" else (cf.claim53_model(N), cf.claim53_policy(N))
    xfun = (lambda u: cf.thm41_x(u, s)) if which == "thm41" else (lambda u: cf.claim53_x(u, N))
    done = np.unique(dyck.complete(plain, *deep_prefixes), axis=0)
    with torch.no_grad():
        logits = model(input_ids=torch.as_tensor(done, dtype=torch.long) + cf.VOCAB.id("(")).logits[:, :-1]
    x = xfun(done)[:, :-1]                                             # the last row predicts a 33rd token
    assert ((logits[..., 3] > logits[..., 4]) == (x > 0)).all()
    # as confident as [X, -X] up to the final norm's saturation at 64 sqrt(8) = 181 (module docstring of dyck_closed_form)
    assert (logits[..., 3] - logits[..., 4]).abs().min() >= 2 * min(x.abs().min().item(), 150.0)
    cut = dyck.cut_at_max(np.asarray(done[:500]))
    np.testing.assert_array_equal(dyck.complete(cf.lab_policy(model), *cut), dyck.complete(plain, *cut))
    loaded = lab_loaded(model, cf.VOCAB, name=f"dyck-{which}")
    toks = torch.as_tensor(done[0], dtype=torch.long) + 3
    assert interp.verify_attention(loaded, toks).attrs["ok"]
    pat = interp.capture(loaded, toks, patterns=True).patterns[0][0]
    np.testing.assert_allclose(pat, torch.tril(torch.ones(N, N)) / torch.arange(1, N + 1)[:, None], atol=1e-7)


def probe(n_words=128, seed=4):
    w = dyck.sample(N, None, n_words, np.random.default_rng(seed))
    return torch.as_tensor(w, dtype=torch.long) + 3, torch.as_tensor(1 - 2 * w.astype(np.int64))


def test_counting_detector_scores_one_on_the_closed_forms():
    ids, steps = probe()
    for model in (cf.thm41_model(training_words()[0]), cf.claim53_model(N)):
        both = counting.detect(lab_loaded(model, cf.VOCAB), ids, steps)
        assert list(both["head"]) == [0, -1]                                   # the head, and its layer as a whole
        assert both.drop(columns="head").iloc[0].equals(both.drop(columns="head").iloc[1])  # one head: the same numbers
        df = both[both["head"] == 0].reset_index(drop=True)
        assert df.uniformity[0] == pytest.approx(1.0, abs=1e-6) and df.r2[0] == pytest.approx(1.0, abs=1e-6)
        assert df["shape"][0] == pytest.approx(1.0, abs=1e-6)
        # use: the closed form is right at every forced bracket; mean-ablating its one head leaves a position-only
        # model, at or below the best position-only rule, so the whole gain over that rule is attributed: use = 1
        assert df.acc[0] == 1.0 and df.acc_ablated[0] <= df.blind[0] and df.use[0] == 1.0
        assert df.score[0] == pytest.approx(1.0, abs=1e-6)


def test_counting_detector_low_on_non_uniform_heads():
    ids, steps = probe()
    b, n = steps.shape
    # a head on the current token only: one key per row, entropy 0, so uniformity and score are exactly 0
    one_hot = counting.counting_scores(torch.eye(n).expand(b, 1, n, n), steps.float()[:, :, None, None], steps)
    assert one_hot.uniformity[0] == 0 and one_hot["shape"][0] == 0
    # Thm 4.1's head with a peaked query (scores 30 B_j): the detector's uniformity equals the entropy computed
    # here from B, and the score falls far below the closed form's 1 (and the head stops completing deep prefixes)
    s = training_words()[0]
    model = cf.thm41_model(s)
    with torch.no_grad():
        model.model.layers[0].self_attn.q_proj.weight[0, 2] = 1.0      # query = the constant token filler
        model.model.layers[0].self_attn.k_proj.weight[0, 1] = 30.0     # key = 30 B_j
    df = counting.detect(lab_loaded(model, cf.VOCAB), ids, steps)
    df = df[df["head"] == 0].reset_index(drop=True)
    c = (2 * 16 / 8 + 1e-6) ** -0.5                                      # input-norm factor (K = 4, d_model = 8)
    qk = c * math.sqrt(15) * 30 * c * cf.thm41_positions(s) / math.sqrt(8)  # logit of key j (same for every query)
    logits = torch.where(torch.tril(torch.ones(n, n, dtype=torch.bool)), qk[None, :], -torch.inf)
    p = torch.softmax(logits, -1)[1:]
    ent = -torch.special.xlogy(p, p).sum(-1) / torch.log(torch.arange(2, n + 1, dtype=torch.float64))
    assert df.uniformity[0] == pytest.approx(float(ent.mean()), abs=1e-5)
    assert df.uniformity[0] < 0.6 and df["shape"][0] < 0.5 and df.score[0] < 0.5
    assert dyck.completion_accuracy(cf.lab_policy(model), *dyck.cut_at_max(dyck.enumerate_words(N, range(13, 17)))) < 0.5


def test_forced_brackets_agree_with_completability():
    """A bracket is forced iff exactly one of '(' / ')' keeps the prefix completable (dyck.is_completable)."""
    w = dyck.sample(N, None, 64, np.random.default_rng(9))
    steps = torch.as_tensor(1 - 2 * w.astype(np.int64))
    forced = counting.forced_brackets(torch.cat([torch.zeros(64, 1, dtype=torch.long), steps], 1))[:, 1:]  # with <bos>
    for r in range(N):
        ok = [dyck.is_completable(np.concatenate([w[:, :r + 1], np.full((64, 1), b, np.uint8)], 1), N) if r < N - 1
              else np.zeros(64, bool) for b in (0, 1)]
        want = np.where(ok[0] & ~ok[1], 0, np.where(ok[1] & ~ok[0], 1, -1))
        assert (forced[:, r].numpy() == want).all(), r
    with pytest.raises(ValueError):
        counting.forced_brackets(torch.tensor([[1, 1, -1]]))  # not a whole word


def test_counting_use_is_zero_on_untrained_models_whatever_their_shape():
    """The old score's failure: every head of an untrained model looks like a counting head (shape ~1); use is 0."""
    ids, steps = probe()
    for pe in ("learned", "rope", "nope"):
        torch.manual_seed(0)
        model = interp.lab.LabForCausalLM(interp.lab.LabConfig(vocab_size=len(cf.VOCAB), n_layers=2, n_heads=4, d_model=32,
                                                               d_mlp=128, pe=pe, max_positions=64))
        df = counting.detect(lab_loaded(model, cf.VOCAB), ids, steps)
        assert (df["shape"] > 0.9).all() and (df.use == 0).all() and (df.score == 0).all()


@torch.no_grad()
def test_mean_ablation_replaces_the_head_output_and_restores_the_model():
    ids, steps = probe(16)
    hf = cf.thm41_model(training_words()[0])
    before = hf(input_ids=ids).logits
    means = counting.head_means(hf, ids)
    with counting.mean_ablated(hf, 0, 0, means[0]):
        abl = hf(input_ids=ids).logits
    assert torch.equal(hf(input_ids=ids).logits, before) and not torch.allclose(abl, before)
    # with the head's output fixed per position, the logits no longer depend on the prompt's brackets (1 layer)
    assert torch.allclose(abl - abl.mean(0), torch.zeros_like(abl), atol=1e-4 * float(abl.abs().max()))
    with pytest.raises(ValueError):
        with counting.mean_ablated(hf, 0, 3, means[0]):
            pass


def test_quick_analysis(tmp_path):
    df = load_script(ROOT / "p002_dyck/dyck_depth.py").main(["--quick", "--out", str(tmp_path)])
    assert {"model", "train_depth", "test_set", "decoding", "accuracy"} <= set(df.columns)
    assert set(df.test_set) == {"depth<=q", "depth>=9", "depth>=13", "all-open16"} and set(df.decoding) == {"greedy", "sampled"}
    assert {"seed", "width"} <= set(df.columns) and set(df.width.dropna()) == {32, 8}
    assert df.accuracy.between(0, 1).all()
    closed = df[df.model.str.startswith("closed-form")]
    assert len(closed) == 16 and (closed.accuracy == 1.0).all()       # Thm 4.1 / Claim 5.3: every prefix completed
    assert pd.read_csv(tmp_path / "dyck.csv").shape == df.shape
    cnt = pd.read_csv(tmp_path / "dyck_counting.csv")
    assert set(cnt.state) == {"init", "trained"} and cnt.score.between(0, 1).all() and cnt.use.between(0, 1).all()
    assert (cnt[cnt.state == "init"].score == 0).all()
    assert (tmp_path / "dyck.html").exists()
