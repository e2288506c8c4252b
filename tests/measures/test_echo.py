"""Echo score (``interp.measures.echo``) equals RazorAttention's echo mask applied to materialised patterns
(``interp.hooks.capture(..., patterns=True)``), on both engines and every tiny model (GQA, MQA + sliding window,
biases), on repeated prompts with and without a BOS, with a truncated last copy; text prompts add nothing."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from interp.engine import ScanConfig, scan
from interp.hooks.capture import capture
from interp.measures.echo import echo_pairs, period
from tests.conftest import random_tokens


def _mask(N: int, s: int, n: int) -> torch.Tensor:
    """RazorAttention's echo mask, written from its definition: query i in copy c >= 1 marks i - n, i - 2n, ... >= s."""
    D = torch.zeros(N, N)
    for i in range(s + n, N):
        j = i - n
        while j >= s:
            D[i, j] = 1
            j -= n
    return D


def test_period_and_pairs():
    r = random_tokens(7, seed=1, vocab=50)
    assert period(torch.cat([torch.tensor([0]), r, r, r])) in ((1, 7),)
    assert period(torch.cat([r, r, r[:3]])) == (0, 7)  # truncated last copy
    assert period(torch.cat([torch.tensor([0]), r, r[:4]])) == (1, 7)  # a copy cut to 4 of 7 tokens still counts
    assert period(torch.cat([torch.tensor([0]), r, r[:3]])) is None  # less than half a copy repeated
    assert period(random_tokens(40, seed=2, vocab=1000)) is None
    qi, kj = echo_pairs(1 + 3 * 7, 1, 7)
    D = torch.zeros(22, 22)
    D[qi, kj] = 1
    assert torch.equal(D, _mask(22, 1, 7)) and int(D.sum()) == 3 * 7  # (K - 1) K / 2 * n pairs for K = 3


def test_echo_equals_materialised_mask(tiny):
    r, r2 = random_tokens(11, seed=7, vocab=60), random_tokens(9, seed=8, vocab=60)
    prompts = [torch.cat([torch.tensor([1]), r, r, r]), torch.cat([r2, r2, r2, r2[:5]]), random_tokens(30, seed=3, vocab=250)]
    want = []
    for p in prompts[:2]:
        s, n = period(p)
        D = _mask(p.numel(), s, n).double()
        want.append(np.stack([(A.double() * D).sum((-1, -2)).numpy() / p.numel() for A in capture(tiny, p, patterns=True).patterns]))
    want = np.mean(want, axis=0).reshape(-1)
    assert want.max() > 0.01  # random weights still put visible mass on the echo keys: not a comparison of zeros
    for engine in ("fused-cpu", "python"):
        mp = pytest.MonkeyPatch()
        mp.setenv("INTERP_KERNEL", "0" if engine == "python" else "auto")
        h = scan(tiny, prompts, ScanConfig(echo=True, block_size=8)).heads
        mp.undo()
        np.testing.assert_allclose(h["echo_score"].to_numpy(), want, atol=1e-6, err_msg=engine)


def test_echo_nan_without_periodic_prompts(tiny):
    h = scan(tiny, [random_tokens(24, seed=5, vocab=250)], ScanConfig(echo=True)).heads
    assert h["echo_score"].isna().all()
