"""Slash score definitions (paper 004, eq. 6)."""

import pytest
import torch

from interp.measures import slash


def test_slash_from_pattern_by_explicit_loop():
    g = torch.Generator().manual_seed(0)
    A = torch.softmax(torch.randn(2, 12, 12, generator=g).masked_fill(torch.ones(12, 12).triu(1).bool(), -torch.inf), -1)
    got = slash.slash_from_pattern(A)
    for d in range(12 - slash.SKIP):
        vals = [A[:, i, i - d] for i in range(12) if i - d >= slash.SKIP]
        torch.testing.assert_close(got[:, d], torch.stack(vals).double().mean(0))
    assert torch.isnan(got[:, 12 - slash.SKIP :]).all()


def test_valid_counts_and_sdh_flags():
    assert slash.valid_counts(10).tolist()[:7] == [6, 5, 4, 3, 2, 1, 0]
    scores = torch.tensor([[[0.05, 0.3, 0.02, 0.0, 0.0, 0.002]]], dtype=torch.float64)
    cols = slash.sdh_columns(scores, range(0, 5), 0.1, "slash_", "is_sdh")
    assert cols["slash_delta"].item() == 1 and cols["is_sdh"].item()
    cols = slash.sdh_columns(scores, range(5, 9), 1e-3, "long_", "is_long")
    assert cols["long_score"].item() == pytest.approx(0.002) and cols["is_long"].item()
    empty = slash.sdh_columns(scores, range(500, 5001), 1e-3, "long_", "is_long")
    assert torch.isnan(empty["long_score"]).all() and not empty["is_long"].any()


def test_the_default_window_scores_its_lags_exactly_and_no_others():
    """Without ``full_profile`` the scan scores lags 0..63 and the long range; every column of heads.csv equals the
    whole-profile scan's, lags outside the window are NaN (never a silent 0)."""
    from interp import load_model
    from interp.engine import ScanConfig, scan

    m = load_model("tiny-llama", device="cpu")
    prompts = [torch.randint(0, 200, (n,), generator=torch.Generator().manual_seed(n)) for n in (150, 170, 160)]
    kw = dict(block_size=16, long_lags=(100, 120), long_min_entries=20)
    part, full = scan(m, prompts, ScanConfig(**kw)), scan(m, prompts, ScanConfig(full_profile=True, **kw))
    inside = slash.lag_mask(170, part.config)
    assert inside[:64].all() and inside[100:121].all() and not inside[64:100].any() and not inside[121:].any()
    torch.testing.assert_close(part.scores[..., inside], full.scores[..., inside], equal_nan=True)
    assert part.scores[..., ~inside].isnan().all() and not full.scores[..., 64:100].isnan().any()
    import pandas as pd

    pd.testing.assert_frame_equal(part.heads, full.heads)
