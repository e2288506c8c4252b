"""004 App. D in the lab (interp.lab.icl_regression): the data model's labels follow its linear tasks, the D.4 model's
attention and prediction equal eq. 22 written out by hand, the frequency sets meet / violate Assumption D.1 as
stated, and Algorithm 1 trains one block per stage."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from interp.experiments.trajectory import first_crossing
from interp.lab import icl_regression as R


def _rot(phi: float) -> np.ndarray:
    return np.array([[math.cos(phi), -math.sin(phi)], [math.sin(phi), math.cos(phi)]])


def _R(theta: np.ndarray, pos: float) -> np.ndarray:
    """004 eq. 3: block-diagonal rotation diag(rho(pos theta_1), ...), interleaved pairs."""
    out = np.zeros((2 * len(theta), 2 * len(theta)))
    for s, th in enumerate(theta):
        out[2 * s: 2 * s + 2, 2 * s: 2 * s + 2] = _rot(pos * th)
    return out


@pytest.mark.parametrize("delta", [1, 2, 3])
def test_labels_follow_the_linear_tasks(delta):
    data = R.ICLData(K=4, n_in=6, delta=delta, d_c=4)
    b = data.sample(64, torch.Generator().manual_seed(delta))
    E, dc, K = b["E"].numpy(), data.d_c, data.K
    xp, yp = data.positions()
    assert E.shape == (64, (delta + 1) * 6 + 1, data.d) and np.all(yp - xp == delta)
    assert np.all(E[:, :, 0] == 1) and np.all(E[:, :, 1:dc] == 0)           # every token on the cone axis c = e_1
    x = E[:, xp, dc:dc + K]
    assert np.all(x.sum(-1) == 1) and np.all(np.isin(x, [0, 1]))            # x_i is one of the K orthonormal features
    w = b["w"].numpy()
    assert np.all(np.abs(w) == 1) and np.allclose(np.linalg.norm(w, axis=1), math.sqrt(K))
    y = E[:, yp, -1]
    assert np.allclose(y, np.einsum("bk,bik->bi", w, x))                   # y_i = <w, x_i>
    assert np.all(E[:, yp, dc + K] == 1) and np.all(E[:, yp, dc:dc + K] == 0)
    xq = E[:, -1, dc:dc + K]
    assert np.allclose(b["target"].numpy(), np.einsum("bk,bk->b", w, xq))  # the question's answer <w, x_q>
    filler = np.setdiff1d(np.arange(data.N - 1), np.concatenate([xp, yp]))
    assert len(filler) == (delta - 1) * 6 and np.all(E[:, filler, dc:] == 0)
    # p_k = 1/K: feature counts over many prompts are near uniform
    counts = np.bincount(b["feat"].numpy().ravel(), minlength=K) / b["feat"].numel()
    assert np.abs(counts - 1 / K).max() < 0.06


@pytest.mark.parametrize("kind", ["pulse", "rope"])
def test_attention_and_prediction_equal_eq22(kind):
    data = R.ICLData(K=2, n_in=3, delta=1, d_c=8)
    theta = R.frequencies(kind, data)
    model = R.D4Transformer(data, theta)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        model.WQ1.copy_(torch.randn(8, 8, generator=g, dtype=torch.float64))
        model.WQ2.copy_(torch.randn(4, 4, generator=g, dtype=torch.float64))
    b = data.sample(5, g)
    out = model(b["E"])
    th, N, dc = theta.numpy(), data.N, data.d_c
    q1 = np.eye(dc)[0] @ model.WQ1.detach().numpy()            # c^T W~Q1
    c_t = np.array([1.0, 0.0] * (dc // 2))
    A = np.full((N, N), -np.inf)
    for i in range(1, N + 1):
        for j in range(1, i + 1):
            A[i - 1, j - 1] = sum(q1[2 * s] * math.cos((j - i) * th[s]) + q1[2 * s + 1] * math.sin((j - i) * th[s])
                                  for s in range(dc // 2))
            assert A[i - 1, j - 1] == pytest.approx(q1 @ _R(th[:dc // 2], j - i) @ c_t, abs=1e-12)
    S1 = np.exp(A - A.max(1, keepdims=True))
    S1 /= S1.sum(1, keepdims=True)
    assert np.allclose(out["S1"].detach().numpy(), S1[None], atol=1e-12)
    E = b["E"].numpy()
    for p in range(5):
        keys = (S1 @ E[p])[:, dc:]
        q2 = E[p, -1, dc:] @ model.WQ2.detach().numpy()
        u = np.array([(_R(th[dc // 2:], N) @ q2) @ (_R(th[dc // 2:], i) @ keys[i - 1]) for i in range(1, N + 1)])
        S2 = np.exp(u - u.max())
        S2 /= S2.sum()
        assert np.allclose(out["S2"][p].detach().numpy(), S2, atol=1e-12)
        assert out["y_hat"][p].item() == pytest.approx(S2 @ E[p, :, -1], abs=1e-12)


def test_frequency_sets_and_assumption_d1():
    data = R.ICLData(K=4, n_in=16, d_c=34)  # N = 33 <= 2M = 34
    M = data.d_c // 2
    pulse = R.pulse_check(R.frequencies("pulse", data)[:M], data.N)
    assert pulse["eps_fn"] < 1e-9 and pulse["C1"] == pytest.approx(M + 0.5)   # an exact pulse: M at 0, -1/2 elsewhere
    for kind in FREQ_ALL:
        th = R.frequencies(kind, data)
        assert th.shape == (data.d // 2,) and torch.all(th[M:] <= data.N ** -2.0)  # item 1: low semantic planes
    assert R.pulse_check(R.frequencies("low", data)[:M], data.N)["C1"] < 1e-2    # item 2 fails: no spike
    assert math.isinf(R.pulse_check(R.frequencies("nope", data)[:M], data.N)["L"])
    with pytest.raises(ValueError, match="exact pulse set needs d_c >= N"):
        R.frequencies("pulse", R.ICLData(K=4, n_in=16, d_c=8))


def test_band_removals_zero_exactly_the_bands_by_frequency():
    """17 cone planes split 6 / 6 / 5 by decreasing frequency: rope's are already in that order, the pulse's reversed."""
    data = R.ICLData(K=4, n_in=16, d_c=34)
    M = data.d_c // 2
    for base, order in (("rope", np.arange(M)), ("pulse", np.arange(M)[::-1])):
        full = R.frequencies(base, data)
        high, medium, low = (order[i] for i in np.array_split(np.arange(M), 3))
        for removal, gone in (("wo_high", high), ("wo_medium", medium), ("wo_high_medium", np.r_[high, medium])):
            th = R.frequencies(f"{base}-{removal}", data)
            kept = np.setdiff1d(np.arange(M), gone)
            assert torch.all(th[gone] == 0) and torch.equal(th[kept], full[kept]) and torch.equal(th[M:], full[M:])
        assert full[high].min() > full[medium].max() > 0 and full[medium].min() > full[low].max()
    with pytest.raises(ValueError, match="band removals are pulse-<r> or rope-<r>"):
        R.frequencies("low-wo_high", data)


FREQ_ALL = R.FREQUENCY_SETS


def test_nope_layer1_stays_uniform_whatever_its_weights():
    data = R.ICLData(K=2, n_in=4, d_c=10)
    model = R.D4Transformer(data, R.frequencies("nope", data))
    with torch.no_grad():
        model.WQ1.copy_(torch.randn(10, 10, dtype=torch.float64) * 5)
    S1 = model.layer1_scores(data.sample(2, torch.Generator().manual_seed(0))["E"])[0]
    n = data.N
    assert torch.allclose(S1, torch.ones(n, n, dtype=torch.float64).tril() / torch.arange(1, n + 1)[:, None])


def test_algorithm1_trains_one_block_per_stage_and_forms_the_slash():
    data = R.ICLData(K=2, n_in=8, d_c=18)
    trace, model = R.train_icl(data, R.frequencies("pulse", data), schedule="two-stage", tau1=30, tau2=0, lr1=1.0,
                               batch=64, eval_batch=64, seed=0)
    assert torch.equal(model.WQ2.detach(), torch.eye(data.K + 2, dtype=torch.float64))  # Stage I: W~Q2 = I frozen
    assert trace["lag_min"].iloc[-1] > 0.5 > trace["lag_min"].iloc[0]                    # the lag-1 mass rose
    assert np.allclose(trace["r1_q1"].iloc[1:], 1.0)                                     # every query is c^T W~Q1: rank one
    assert torch.linalg.matrix_rank(model.WQ1.detach()) == 1                             # gradients are c (x) g
    w1 = model.WQ1.detach().clone()
    trace2, model2 = R.train_icl(data, R.frequencies("pulse", data), schedule="two-stage", tau1=30, tau2=5, batch=64,
                                 eval_batch=64, seed=0)
    assert torch.allclose(model2.WQ1.detach(), w1) and not torch.equal(model2.WQ2.detach(), torch.eye(data.K + 2, dtype=torch.float64))
    assert set(trace2["stage"]) == {1, 2} and math.isnan(first_crossing(trace2, "lag_min", 2.0))
    assert first_crossing(trace2, "lag_min", 0.5) == trace2.loc[trace2["lag_min"] >= 0.5, "step"].iloc[0]
