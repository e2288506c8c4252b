"""The massive measure (Jin et al. 2025): channel norms equal an independent computation from ``interp.capture``,
the massive-channel rule on hand-built norms, and the columns on a hand-built state."""

from types import SimpleNamespace

import math

import pytest
import torch

import interp
from interp.engine import ScanConfig, scan
from interp.measures.massive import KINDS, Massive, channel_means, channel_norms, channel_plane, channel_table, massive_mask
from tests.conftest import random_tokens


@pytest.fixture(scope="module")
def one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def test_norms_equal_sums_of_squares_from_capture(tiny, one_thread):
    prompts = [random_tokens(37, seed=3), random_tokens(21, seed=4)]
    res = scan(tiny, prompts, ScanConfig(massive=True, massive_lambda=1.1))
    caps = [interp.capture(tiny, p) for p in prompts]
    for kind in KINDS:
        want = torch.stack([sum(getattr(c, kind)[l].double().pow(2).sum(0) for c in caps) for l in range(tiny.card.n_layers)]).sqrt()
        torch.testing.assert_close(channel_norms(res, kind), want, rtol=1e-5, atol=1e-6, msg=kind)
    for x in ("q", "k"):
        want = torch.stack([sum(getattr(c, f"{x}_rot")[l].double().sum(0) for c in caps) for l in range(tiny.card.n_layers)]) / 58
        torch.testing.assert_close(channel_means(res, x), want, rtol=1e-5, atol=1e-6)
    # the columns from the same independent norms (lambda 1.1 so that some channels are massive on random weights)
    kv = torch.arange(tiny.card.n_heads) // tiny.card.group_size
    M = {k: torch.stack([sum(getattr(c, k)[l].double().pow(2).sum(0) for c in caps) for l in range(tiny.card.n_layers)]).sqrt()
         for k in ("q_rot", "k_rot", "v")}
    h = res.heads
    L, H = tiny.card.n_layers, tiny.card.n_heads
    get = lambda c: torch.tensor(h[c].to_numpy()).reshape(L, H)  # noqa: E731
    torch.testing.assert_close(get("massive_q_count"), (M["q_rot"] > 1.1 * M["q_rot"].mean(-1, keepdim=True)).sum(-1).double())
    torch.testing.assert_close(get("massive_k_ratio"), (M["k_rot"].max(-1).values / M["k_rot"].mean(-1))[:, kv], rtol=1e-5, atol=0)
    torch.testing.assert_close(get("massive_v_ratio"), (M["v"].max(-1).values / M["v"].mean(-1))[:, kv], rtol=1e-5, atol=0)
    assert get("massive_q_count").sum() > 0


def test_capture_returns_the_values_the_model_projects(tiny_llama):
    t = random_tokens(19, seed=7)
    cap = interp.capture(tiny_llama, t)
    assert len(cap.v) == tiny_llama.card.n_layers
    assert cap.v[0].shape == (19, tiny_llama.card.n_kv_heads, tiny_llama.card.d_head)
    base = tiny_llama.hf.model
    with torch.no_grad():
        h = base.layers[0].input_layernorm(base.embed_tokens(t[None]))
        v = base.layers[0].self_attn.v_proj(h)[0].view(19, tiny_llama.card.n_kv_heads, tiny_llama.card.d_head)
    torch.testing.assert_close(cap.v[0], v.float(), rtol=1e-5, atol=1e-6)


def test_rule_on_hand_built_norms():
    M = torch.tensor([[1.0, 1, 1, 1, 1, 1, 1, 30],   # mean 4.625, 5 x mean = 23.125: channel 7 massive
                      [1.0, 1, 1, 1, 1, 1, 1, 1],    # flat: none
                      [0.0, 0, 0, 0, 0, 0, 0, 5.0]])  # mean 0.625, 5 x mean = 3.125: channel 7 massive
    got = massive_mask(M, 5.0)
    assert got.tolist() == [[False] * 7 + [True], [False] * 8, [False] * 7 + [True]]
    # strictly greater: a channel exactly at lambda x mean is not massive
    edge = torch.tensor([[5.0, 0.0, 0.0, 0.0, 0.0]])  # mean 1: 5 is not > 5
    assert not massive_mask(edge, 5.0).any() and massive_mask(edge, 4.99).any()
    with pytest.raises(ValueError, match="> 0"):
        massive_mask(M, 0.0)


def test_channel_planes_follow_the_pairing():
    assert channel_plane(8, "rotate_half").tolist() == [0, 1, 2, 3, 0, 1, 2, 3]
    assert channel_plane(8, "interleaved").tolist() == [0, 0, 1, 1, 2, 2, 3, 3]


def test_columns_on_a_hand_built_state():
    """One layer, two query heads on one kv head, d_head 12 (6 planes, low third = planes 4, 5), rotate_half pairing."""
    D, lam = 12, 5.0
    card = SimpleNamespace(n_heads=2, n_kv_heads=1, group_size=2, d_head=D, pairing="rotate_half", n_layers=1)
    sq = lambda norms: torch.tensor(norms, dtype=torch.float64).pow(2)  # noqa: E731  M -> sum of squares
    q = [[1.0] * D, [1.0] * D]
    q[0][5] = 40.0  # channel 5: plane 5 (low third), massive
    q[1][4] = 40.0  # channel 4: plane 4 (low), massive
    q[1][6] = 40.0  # channel 6: plane 0 (high), massive; mean 87/12 = 7.25, 5 x mean = 36.25 < 40
    k = [[1.0] * D]
    k[0][11] = 3.0  # plane 5, largest but not massive
    v = [[2.0] * D]
    state = {"massive_sq_q": torch.stack([sq(q), sq(q)])[None], "massive_sq_k": torch.stack([sq(k), sq(k)])[None],
             "massive_sq_v": sq(v)[None], "massive_sum_q": torch.zeros(1, 2, D, dtype=torch.float64),
             "massive_sum_k": torch.zeros(1, 1, D, dtype=torch.float64), "massive_tokens": torch.tensor([10.0], dtype=torch.float64)}
    s = SimpleNamespace(state=state, card=card, config=SimpleNamespace(massive_lambda=lam, massive=True), meta={})
    out = Massive().compute(s)
    assert out["massive_q_count"].tolist() == [[1.0, 2.0]] and out["massive_q_pre_count"].tolist() == [[1.0, 2.0]]
    assert out["massive_k_count"].tolist() == [[0.0, 0.0]] and out["massive_v_count"].tolist() == [[0.0, 0.0]]
    assert out["massive_q_plane"][0, 0] == 5 and out["massive_q_plane"][0, 1] == 4  # argmax: the first of the ties
    assert out["massive_q_low_share"][0, 0] == 1.0 and out["massive_q_low_share"][0, 1] == 0.5
    assert math.isnan(out["massive_k_low_share"][0, 0]) and out["massive_k_plane"].tolist() == [[5.0, 5.0]]
    assert out["massive_v_ratio"].tolist() == [[1.0, 1.0]]
    assert out["massive_q_ratio"][0, 0] == pytest.approx(40 / (51 / 12))
    t = channel_table(s)
    assert len(t) == 2 * 2 * D + 3 * D  # q_pre, q_rot: 2 heads; k_pre, k_rot, v: 1 kv head
    assert t[(t.kind == "q_rot") & t.massive][["head", "channel", "plane"]].values.tolist() == [[0, 5, 5], [1, 4, 4], [1, 6, 0]]
