"""Copy task of paper 000: generator invariants, batches and exact match, the closed-form 2D-RoPE copy layer
(App. L, Thm L.1) against every short string and long random ones, and the analysis script in quick mode."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from interp.lab.copy_closed_form import NL, OUT, build_copy_layer, copies, copy_margin, greedy_copy, teacher_forced
from interp.lab.copy_attention import copy_shares
from interp.lab.copy_task import (DISTRIBUTIONS, EOS, IMBALANCE_PS, NEWLINE, OUTPUT, LengthCurriculum, copy_correct, copy_symbols,
                                  copy_vocab, encode_batch, exact_match, imbalanced_string, recursive_flip_string,
                                  repeat_flip_string, sample_string, sample_strings, train_batch_fn)
from interp.rope.variants import Rope2D, positions_2d
from tests.conftest import load_script

ANALYSES = Path(__file__).resolve().parents[2] / "analyses"
VOCAB = copy_vocab()
ALL_SHORT = [list(b) for n in range(1, 9) for b in itertools.product((0, 1), repeat=n)]  # 2 + 4 + ... + 256 = 510


# ----------------------------------------------------------------------------------------------- generators


@pytest.mark.parametrize("dist", DISTRIBUTIONS)
def test_every_distribution_gives_bits_of_the_asked_length(dist):
    rng = np.random.default_rng(0)
    for n in (1, 2, 3, 7, 8, 64, 100, 1281):
        s = sample_string(dist, n, rng)
        assert s.shape == (n,) and set(np.unique(s)) <= {0, 1}
    lens = [len(s) for s in sample_strings(dist, 400, 5, 9, rng)]
    assert set(lens) == {5, 6, 7, 8, 9}  # inclusive bounds, every length drawn


def test_bad_arguments_raise_one_clear_value_error():
    rng = np.random.default_rng(0)
    for bad in (lambda: sample_string("zipf", 4, rng), lambda: sample_string("uniform", 0, rng),
                lambda: sample_strings("uniform", 3, 5, 4, rng), lambda: imbalanced_string(4, rng, p=1.5),
                lambda: repeat_flip_string(8, rng, 0, 0.1), lambda: copy_symbols([0, 2]),
                lambda: encode_batch(VOCAB, []), lambda: train_batch_fn(VOCAB, batch_size=0)):
        with pytest.raises(ValueError):
            bad()


def test_imbalanced_bits_are_zero_with_probability_p():
    rng = np.random.default_rng(1)
    for p in IMBALANCE_PS:
        s, got = imbalanced_string(40_000, rng, p=p)
        sd = math.sqrt(p * (1 - p) / s.size)
        assert got == p and abs((s == 0).mean() - p) < 5 * sd  # "first token with probability p"


def test_imbalanced_draws_p_uniformly_from_the_paper_set():
    rng = np.random.default_rng(2)
    n_str = 7000
    ps = np.array([imbalanced_string(50, rng)[1] for _ in range(n_str)])
    assert set(ps) == set(IMBALANCE_PS)
    for p in IMBALANCE_PS:  # each value about 1/7 of the draws (binomial, 5 sd)
        assert abs((ps == p).mean() - 1 / 7) < 5 * math.sqrt((1 / 7) * (6 / 7) / n_str)


def test_recursive_flip_follows_s_c_s_and_truncates_a_prefix():
    rng = np.random.default_rng(3)
    flips = []
    for n in (1, 2, 3, 4, 7, 8, 15, 100, 1280):
        s = recursive_flip_string(n, rng)
        for i in range(n):
            k = int(math.floor(math.log2(i + 1)))
            if i != 2**k - 1:  # inside a copy of the previous round's string: s[i] = s[i - 2^k]
                assert s[i] == s[i - 2**k], (n, i)
        flips += [int(s[2**k - 1]) for k in range(int(math.log2(n)) + 1)]
    assert 0 < np.mean(flips) < 1  # the inserted bits c (and the first) are random, not constant
    # truncation: the first n bits of a longer draw from the same generator state (same c's)
    for n, big in ((5, 31), (100, 1000)):
        a = recursive_flip_string(n, np.random.default_rng(7))
        b = recursive_flip_string(big, np.random.default_rng(7))
        assert np.array_equal(a, b[:n])


def test_recursive_flip_rebuilt_from_its_definition():
    rng = np.random.default_rng(4)
    for n in (1, 3, 9, 63, 64, 500):
        s = recursive_flip_string(n, rng)
        ref = [int(s[0])]
        k = 1
        while len(ref) < n:  # s <- s + c + s, c read off at index 2^k - 1
            ref = ref + [int(s[len(ref)])] + ref
            k += 1
        assert ref[:n] == s.tolist()


def test_repeat_flip_tiles_the_base_and_flips_at_rate_p():
    rng = np.random.default_rng(5)
    s = repeat_flip_string(1000, rng, 6, 0.0)
    assert np.array_equal(s, np.resize(s[:6], 1000))
    base = np.random.default_rng(9).integers(0, 2, size=8, dtype=np.int8)
    s = repeat_flip_string(50_000, np.random.default_rng(9), 8, 0.2)
    assert abs((s != np.resize(base, 50_000)).mean() - 0.2) < 5 * math.sqrt(0.2 * 0.8 / 50_000)


# ----------------------------------------------------------------------------------------------- batches


def test_copy_sequences_have_the_paper_format_and_mask_the_copy_and_eos():
    rng = np.random.default_rng(6)
    strings = sample_strings("uniform", 20, 1, 30, rng)
    for bos in (True, False):
        b = encode_batch(VOCAB, strings, bos=bos)
        ids, mask = b["input_ids"], b["loss_mask"]
        assert ids.dtype == torch.int64 and mask.dtype == torch.bool and ids.shape == mask.shape
        assert ids.shape[1] == 2 * max(map(len, strings)) + 3 + bos
        for r, s in enumerate(strings):
            n = len(s)
            sym = [str(int(x)) for x in s]
            want = (["<bos>"] if bos else []) + sym + [NEWLINE, OUTPUT] + sym + [EOS]
            assert want == copy_symbols(s, bos=bos)
            assert VOCAB.decode(ids[r, :len(want)]) == want and (ids[r, len(want):] == 0).all()
            assert VOCAB.decode(ids[r][mask[r]]) == sym + [EOS]  # targets: the copy and EOS, nothing else
            assert mask[r].nonzero()[0].item() == n + 2 + bos  # right after <O:>


def test_train_batch_fn_draws_imbalanced_lengths_in_range():
    fn = train_batch_fn(VOCAB, lo=1, hi=64, batch_size=64)
    b = fn(0, np.random.default_rng(0))
    n = b["loss_mask"].sum(1) - 1  # copy length per row
    assert b["input_ids"].shape[0] == 64 and n.min() >= 1 and n.max() <= 64


class _Oracle(torch.nn.Module):
    """Logits = one-hot of the true next token (or a wrong one at chosen positions): exact match known."""

    def __init__(self, break_at=None):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))
        self.break_at = break_at  # (copy length n, copy index k) to get wrong

    def forward(self, input_ids):
        nxt = torch.cat([input_ids[:, 1:], input_ids[:, :1]], 1)
        logits = torch.nn.functional.one_hot(nxt, len(VOCAB)).float()
        if self.break_at:
            n, k = self.break_at
            for r in range(input_ids.shape[0]):
                if int((input_ids[r] > 0).sum()) == 2 * n + 4:  # bos + 2n + 3
                    t = n + 2 + k  # logits at t predict copy index k (target index t + 1)
                    logits[r, t] = logits[r, t].roll(1)
        return type("Out", (), {"logits": logits})()


def test_exact_match_scores_every_string_in_its_own_order():
    rng = np.random.default_rng(8)
    strings = sample_strings("imbalanced", 30, 1, 40, rng) + [np.array([1, 0, 1])]
    assert exact_match(_Oracle(), VOCAB, strings, token_budget=3000).all()
    got = exact_match(_Oracle(break_at=(3, 3)), VOCAB, strings, token_budget=3000)  # EOS of the length-3 strings wrong
    assert (got == np.array([len(s) != 3 for s in strings])).all()
    got = exact_match(_Oracle(break_at=(3, 0)), VOCAB, strings, token_budget=500)  # first copied bit wrong
    assert (got == np.array([len(s) != 3 for s in strings])).all()


def test_copy_correct_ignores_errors_outside_the_target_tokens():
    b = encode_batch(VOCAB, [np.array([0, 1, 1]), np.array([1])])
    nxt = torch.cat([b["input_ids"][:, 1:], b["input_ids"][:, :1]], 1)
    logits = torch.nn.functional.one_hot(nxt, len(VOCAB)).float()
    logits[:, 0] = logits[:, 0].roll(1, -1)  # position 0 predicts the first bit of s: not a target
    assert copy_correct(logits, b).tolist() == [True, True]
    logits[0, 5] = logits[0, 5].roll(1, -1)  # row 0 = bos 0 1 1 nl O: 0 1 1 EOS; the logits at O: predict the first copied bit
    assert copy_correct(logits, b).tolist() == [False, True]


# ----------------------------------------------------------------------------------------------- closed form


@pytest.fixture(scope="module")
def layer():
    return build_copy_layer(d=64, max_len=5000, seed=0)


def test_closed_form_scores_are_app_l_formula(layer):
    """q.k of the rotated vectors = 2 M^2 [sum_col cos(dc beta) - sum_row cos(dr beta)] (module docstring)."""
    s = torch.tensor([0, 1, 1, 0, 1])
    tokens = torch.cat([s, torch.tensor([NL, OUT]), s[:-1]])
    q, k, _ = layer.rotated(tokens)
    rc = positions_2d(tokens, (NL,)).double()
    dr = rc[None, :, 0] - rc[:, None, 0]
    dc = rc[None, :, 1] - rc[:, None, 1]
    beta = layer.beta
    ref = 2 * layer.M**2 * (torch.cos(dc[..., None] * beta).sum(-1) - torch.cos(dr[..., None] * beta).sum(-1))
    assert torch.allclose(q @ k.T, ref, atol=1e-4 * layer.M**2)
    # the margin is the smallest score gap between the source and another row-0 key, as in App. L.2
    m = torch.arange(1, 5001, dtype=torch.float64)
    assert math.isclose(copy_margin(beta, 5000), float((beta.numel() - torch.cos(m[:, None] * beta).sum(1)).min()))
    assert layer.margin > 0 and 2 * layer.M**2 * layer.margin >= math.log(2 * 5000 + 3)


def test_closed_form_greedily_copies_every_string_up_to_length_8(layer):
    failures = [s for s in ALL_SHORT if greedy_copy(layer, s) != (s, True)]
    assert len(ALL_SHORT) == 510 and failures == []


def test_closed_form_puts_most_attention_on_the_source(layer):
    """Sufficient condition of the proof: attention > 1/2 on the same-column key of row 0 (then the argmax is right)."""
    for s in ALL_SHORT[::17] + [[1] * 300, [0, 1] * 200]:
        pred, src = teacher_forced(layer, s)
        assert (pred == torch.tensor(s + [2])).all() and (src > 0.5).all()


@pytest.mark.parametrize("dist,n", [("uniform", 5000), ("recursive_flip", 4095), ("imbalanced", 2999)])
def test_closed_form_copies_long_random_strings(layer, dist, n):
    s = sample_string(dist, n, np.random.default_rng(n))
    assert copies(layer, s)


def test_closed_form_greedy_decoding_of_a_long_string(layer):
    s = sample_string("recursive_flip", 1500, np.random.default_rng(11)).tolist()
    assert greedy_copy(layer, s) == (s, True)


def test_closed_form_with_the_papers_geometric_frequencies():
    g = build_copy_layer(d=64, max_len=2000, frequencies="geometric", base=100.0)  # 000 Sec. 4.1, theta = 100
    assert all(copies(g, s) for s in ALL_SHORT[::5])
    assert copies(g, sample_string("uniform", 2000, np.random.default_rng(12)))


def test_without_rows_the_same_weights_do_not_copy(layer):
    """Control: with 1D positions (no token starts a new row) the layer is shift-invariant and fails."""
    flat = replace(layer, rope=Rope2D(newline_ids=(99,)))
    assert not any(copies(flat, s) for s in ALL_SHORT[::3])


def test_build_copy_layer_rejects_bad_settings():
    for kw in (dict(d=30), dict(d=0), dict(max_len=0), dict(frequencies="linear"), dict(M=-1.0)):
        with pytest.raises(ValueError):
            build_copy_layer(**kw)
    with pytest.raises(ValueError):
        greedy_copy(build_copy_layer(d=8, max_len=4), "01x")


# ----------------------------------------------------------------------------------------------- analysis script


class _FixedCopier(torch.nn.Module):
    """A stand-in copier: logits one-hot on the true next token (``perfect``) or constant (never right on a copy)."""

    def __init__(self, perfect: bool):
        super().__init__()
        self.perfect = perfect
        self.w = torch.nn.Parameter(torch.zeros(()))

    def forward(self, input_ids):
        logits = torch.zeros(*input_ids.shape, len(VOCAB)) + self.w
        if self.perfect:
            logits[:, :-1] += 10 * torch.nn.functional.one_hot(input_ids[:, 1:], len(VOCAB))
        else:
            logits[..., VOCAB.id(EOS)] += 10  # always <EOS>: wrong on every copied bit
        return type("Out", (), {"logits": logits})()


@pytest.mark.parametrize("perfect", [True, False])
def test_length_curriculum_grows_only_when_the_batches_are_copied(perfect):
    cur = LengthCurriculum(VOCAB, "imbalanced", 1, 4, 20, batch_size=16, every=5, threshold=0.9, factor=1.5)
    rng = np.random.default_rng(0)
    model = _FixedCopier(perfect)
    for step in range(40):
        b = cur.batch_fn(step, rng)
        lens = b["loss_mask"].sum(1) - 1                      # copied bits per row (the mask also covers <EOS>)
        assert int(lens.min()) >= 1 and int(lens.max()) <= cur.his[-1]
        loss = cur.loss_fn(model, b)
        assert torch.isfinite(loss)
    if perfect:  # 4 -> 6 -> 9 -> 14 -> 20 (capped), one step every 5 steps of exact match 1
        assert cur.accuracy == [1.0] * 40 and cur.history == [(0, 4), (5, 6), (10, 9), (15, 14), (20, 20)] and cur.hi == 20
    else:
        assert max(cur.accuracy) == 0.0 and cur.history == [(0, 4)] and cur.hi == 4
    with pytest.raises(ValueError):
        LengthCurriculum(VOCAB, start_hi=80, max_hi=64)


def test_copy_shares_on_patterns_with_known_answers():
    n, bos = 5, True
    T = 2 * n + 4
    q = torch.arange(1 + n + 1, 1 + 2 * n + 1)                   # copy queries: <O:> and the copied bits but the last
    ideal = torch.zeros(1, T, T)
    ideal[0, torch.arange(T), 0] = 1.0                            # every other row on <bos>
    ideal[0, q] = 0.0
    ideal[0, q, q - (n + 1)] = 1.0                                # copy rows on the matching source bit
    df = copy_shares(ideal, n, bos)
    assert df.source_share[0] == 1.0 and df.special_share[0] == 0.0 and df.near_share[0] == 0.0
    # the lag-(n+1) diagonal from row 4 + n + 1 = 10 on (004 drops keys 0..3): rows 10, 11 are copy rows (1), 12 and 13 not (0)
    assert df.copy_slash[0] == pytest.approx(0.5)
    stripes = torch.zeros(1, T, T)
    stripes[0, :, 0] = 1.0
    stripes[0, q] = 0.0
    stripes[0, q, 1 + n] = 0.5                                     # half on <\n>, half on <O:>: a locator stripe
    stripes[0, q, 1 + n + 1] = 0.5
    df = copy_shares(stripes, n, bos)
    assert df.special_share[0] == 1.0 and df.source_share[0] == 0.0
    shifted = torch.zeros(1, T, T)
    shifted[0, torch.arange(T), 0] = 1.0
    shifted[0, q] = 0.0
    src = q - (n + 1)
    shifted[0, q, torch.where(src + 1 <= n, src + 1, src - 1)] = 1.0  # a neighbouring source bit: "near", not the source
    df = copy_shares(shifted, n, bos)
    assert df.source_share[0] == 0.0 and df.near_share[0] == 1.0
    with pytest.raises(ValueError):
        copy_shares(torch.zeros(1, T, T), n + 1, bos)


def test_quick_copy_analysis_writes_its_table(tmp_path):
    df = load_script(ANALYSES / "p000_copy/copy_2d_rope.py").main(["--quick", "--out", str(tmp_path)])
    assert list(df.columns[:7]) == ["pe", "layers", "distribution", "length_lo", "length_hi", "exact_match", "seed"]
    assert {"train_distribution", "steps", "final_hi"} <= set(df.columns)
    assert set(df["distribution"]) == set(DISTRIBUTIONS)
    assert set(zip(df["pe"], df["layers"], df["train_distribution"])) == {("rope2d", 1, "imbalanced"), ("rope", 2, "imbalanced"),
                                                                         ("rope", 1, "imbalanced"), ("rope2d", 1, "uniform")}
    assert df["exact_match"].between(0, 1).all() and len(df) == 4 * 3 * df[["length_lo", "length_hi"]].drop_duplicates().shape[0]
    curves = pd.read_csv(tmp_path / "copy_loss.csv")
    assert len(curves) == 4 * 2 and (curves.loss > 0).all()          # 20 steps, one row per 10
    attn = pd.read_csv(tmp_path / "copy_attention.csv")
    assert set(attn.state) == {"trained", "init"} and attn.source_share.between(0, 1).all()
    on_disk = pd.read_csv(tmp_path / "copy.csv")
    assert np.allclose(on_disk["exact_match"], df["exact_match"])
    assert (tmp_path / "copy.html").exists() and (tmp_path / "copy_2d_rope_model" / "config.json").exists()
    summ = pd.read_csv(tmp_path / "copy_summary.csv")  # one seed: the summary's mean is the row itself
    assert (summ.seeds == 1).all() and np.allclose(summ["mean"], df["exact_match"]) and summ.sd.isna().all()
    # the saved 2-layer RoPE copier reloads to the same model: its atlas from --atlas equals the one written in training
    atlas = pd.read_csv(tmp_path / "copy_atlas.csv")
    assert len(atlas) == 2 * 2 and {"role", "rr_induction_score", "prev_token_score"} <= set(atlas.columns)
    again = load_script(ANALYSES / "p000_copy/copy_2d_rope.py").main(["--quick", "--atlas", str(tmp_path / "copy_rope2_model"),
                                                            "--out", str(tmp_path / "again")])
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "again" / "copy_atlas.csv"), atlas)
    assert len(again) == len(atlas)
