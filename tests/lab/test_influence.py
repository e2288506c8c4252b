"""Token removal by attention mask (003 App. F) against independent computations, and the leave-one-out search."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from interp.lab.influence import (attention_keep_mask, dropped_logits, far_token_losses, influential_tokens,
                                  leave_one_out_logprobs, masked_logits, window_layout)
from interp.models import is_installed, load_model
from tests.conftest import load_script

SCRIPT = Path(__file__).resolve().parents[2] / "analyses" / "p003_sparsity/leave_one_out.py"
BOS = 256  # tiny models' BOS id


@pytest.fixture(scope="module")
def llama():
    torch.set_num_threads(1)
    return load_model("tiny-llama", device="cpu").hf


def _bos_ids(b: int, n: int, seed: int) -> torch.Tensor:
    ids = torch.randint(0, 256, (b, n), generator=torch.Generator().manual_seed(seed))
    ids[:, 0] = BOS
    return ids


def _random_keep(b: int, n: int, n_drop: int, seed: int) -> torch.Tensor:
    """``[b, n]`` bool, ``n_drop`` tokens removed per row among 1..n-2 (BOS and the last query stay)."""
    g = torch.Generator().manual_seed(seed)
    keep = torch.ones(b, n, dtype=torch.bool)
    for r in range(b):
        keep[r, 1 + torch.randperm(n - 2, generator=g)[:n_drop]] = False
    return keep


def test_keep_mask_closed_form():
    keep = torch.tensor([[True, False, True, True]])
    m = attention_keep_mask(keep)[0, 0]
    expect = torch.tensor([[1, 0, 0, 0],
                           [1, 1, 0, 0],  # the removed token reads itself (no empty softmax row) ...
                           [1, 0, 1, 0],  # ... and nobody else reads it
                           [1, 0, 1, 1]], dtype=torch.bool)
    assert torch.equal(m, expect)
    assert torch.equal(attention_keep_mask(keep, q_start=2)[0, 0], expect[2:])
    add = attention_keep_mask(keep, implementation="eager")[0, 0]
    assert torch.equal(add == 0, expect) and (add[~expect] == torch.finfo(torch.float32).min).all()


def test_masking_equals_dropping_with_explicit_positions_tiny(llama):
    ids, keep = _bos_ids(4, 48, 0), _random_keep(4, 48, 12, 1)
    masked = masked_logits(llama, ids, keep)
    ref = dropped_logits(llama, ids, keep)  # tokens deleted, original position ids passed
    torch.testing.assert_close(masked[keep].view(4, 36, -1), ref, atol=1e-5, rtol=0)
    # and removal matters: the same kept tokens at positions 0..35 (the gaps closed) give other logits
    closed = llama(input_ids=ids[keep].view(4, -1)).logits
    assert (closed - ref).abs().max() > 1e-2


def test_mask_keeping_everything_is_the_plain_forward_and_removal_is_causal(llama):
    ids = _bos_ids(2, 40, 2)
    torch.testing.assert_close(masked_logits(llama, ids), llama(input_ids=ids).logits, atol=1e-6, rtol=0)
    keep = torch.ones(2, 40, dtype=torch.bool)
    keep[:, 20] = False
    a, b = masked_logits(llama, ids, keep), llama(input_ids=ids).logits
    torch.testing.assert_close(a[:, :20], b[:, :20], atol=1e-6, rtol=0)  # before the removed token: untouched
    assert (a[:, 21:] - b[:, 21:]).abs().amax(-1).min() > 1e-4  # every later position sees the removal


def test_eager_attention_takes_the_additive_mask(llama):
    import copy

    eager = copy.deepcopy(llama)
    eager.set_attn_implementation("eager")
    ids, keep = _bos_ids(2, 32, 3), _random_keep(2, 32, 8, 4)
    torch.testing.assert_close(masked_logits(eager, ids, keep), masked_logits(llama, ids, keep), atol=1e-5, rtol=0)


def test_leave_one_out_search_equals_brute_force_loop(llama):
    ids = _bos_ids(1, 41, 5)[0]
    ctx, target = ids[:-1], int(ids[-1])
    cand = list(range(1, 25))
    lp = leave_one_out_logprobs(llama, ctx, target, cand[::-1], batch_size=5).flip(0)  # any candidate order
    brute = []
    for j in cand:  # one forward per candidate, the token deleted and positions passed explicitly
        keep = torch.ones(1, 40, dtype=torch.bool)
        keep[0, j] = False
        brute.append(torch.log_softmax(dropped_logits(llama, ctx[None], keep)[0, -1].double(), -1)[target])
    brute = torch.stack(brute)
    torch.testing.assert_close(lp, brute, atol=1e-5, rtol=0)
    k = 5
    J = influential_tokens(lp, cand, k)
    assert J == [cand[i] for i in torch.argsort(brute)[:k].tolist()]  # argmin of the probability (App. F)
    gap = torch.sort(brute).values
    assert gap[k] - gap[k - 1] > 1e-4  # the choice is not decided by a near-tie at this tolerance


def test_window_layout_matches_app_f():
    far, short, t = window_layout(128, 64)
    assert far == list(range(63)) and short == list(range(63, 127)) and t == 127  # j in [L_bar - L - 1]: 63
    far, short, t = window_layout(129, 64, n_bos=1)
    assert far[0] == 1 and len(far) == 63 and len(short) == 64 and t == 128


def test_far_token_losses_against_direct_forwards(llama):
    w = _bos_ids(1, 33, 6)[0]  # BOS + L_bar = 32
    r = far_token_losses(llama, w, L=16, k=3, n_bos=1, rng=np.random.default_rng(0))
    ctx, target = w[None, :-1], int(w[-1])
    far, short, _ = window_layout(33, 16, n_bos=1)

    def nll_dropped(visible):
        keep = torch.zeros(1, 32, dtype=torch.bool)
        keep[0, [0, *visible]] = True
        return -torch.log_softmax(dropped_logits(llama, ctx, keep)[0, -1].double(), -1)[target].item()

    assert r.l_long == pytest.approx(-torch.log_softmax(llama(input_ids=ctx).logits[0, -1].double(), -1)[target].item(), abs=1e-5)
    assert r.l_short == pytest.approx(nll_dropped(short), abs=1e-5)
    assert r.l_short_sparse == pytest.approx(nll_dropped(sorted(r.J) + short), abs=1e-5)
    assert r.l_short_random == pytest.approx(nll_dropped(r.random + short), abs=1e-5)
    assert r.l_short_first == pytest.approx(nll_dropped([far[0]] + short), abs=1e-5)
    assert r.J == [far[i] for i in np.argsort(r.loo_logprobs, kind="stable")[:3]]
    assert set(r.random) <= set(far) and len(set(r.random)) == 3


def test_bad_input_raises_value_error(llama):
    ids = _bos_ids(1, 10, 7)
    with pytest.raises(ValueError, match="bool"):
        masked_logits(llama, ids, torch.ones(1, 10))
    with pytest.raises(ValueError, match="candidates"):
        leave_one_out_logprobs(llama, ids[0], 3, [9])  # the last token is the query, not a candidate
    with pytest.raises(ValueError, match="k must"):
        far_token_losses(llama, _bos_ids(1, 33, 7)[0], L=16, k=16, n_bos=1)
    with pytest.raises(ValueError, match="same"):
        dropped_logits(llama, _bos_ids(2, 10, 7), torch.tensor([[True] * 10, [True] * 9 + [False]]))
    with pytest.raises(ValueError, match="full causal"):
        masked_logits(load_model("tiny-mistral", device="cpu").hf, ids)  # sliding window: one 4-D mask cannot serve


def test_quick_script_writes_the_fig2_table(tmp_path):
    df = load_script(SCRIPT).main(["--quick", "--out", str(tmp_path)])
    csv = pd.read_csv(tmp_path / "loo.csv")
    assert len(csv) == len(df) == 3 and {"l_short", "l_long", "l_short_sparse", "l_short_random"} <= set(csv.columns)
    np.testing.assert_allclose(csv["gain_sparse"], csv["l_short"] - csv["l_short_sparse"], atol=1e-9)
    for s in csv["J"]:
        J = [int(v) for v in s.split(";")]
        assert len(set(J)) == 3 and all(1 <= j <= 32 - 16 - 1 for j in J)  # 1-based X_j, j in [L_bar - L - 1]
    assert (tmp_path / "loo_fig2.html").exists() and (tmp_path / "loo_summary.csv").exists()


@pytest.mark.slow
@pytest.mark.skipif(not is_installed("smollm2-135m"), reason="smollm2-135m not installed")
def test_masking_equals_dropping_on_smollm2(smollm2):
    import interp

    torch.set_num_threads(1)
    w = interp.corpus.prompts(smollm2, "pydoc", 1, 128, 0)[:, :-1]
    keep = torch.zeros(1, 127, dtype=torch.bool)
    keep[0, 63:] = True  # the short window plus five far tokens, as in L_short,sparse
    keep[0, [0, 7, 21, 40, 62]] = True
    masked = masked_logits(smollm2.hf, w, keep)[keep][None]
    ref = dropped_logits(smollm2.hf, w, keep)
    # float32 through 30 layers with different matmul shapes (127 vs 69 tokens): equal to 1e-5 of the logit scale
    # (the logits reach ~34 here; the tiny model's stay near 1, hence its absolute 1e-5)
    assert (masked - ref).abs().max() <= 1e-5 * ref.abs().max()
