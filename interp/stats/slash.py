"""Average slash score and slash-dominant heads (SDH).

Source: paper 004 (Cheng, Zhang, Hou et al. 2026), Definition 3.1, eq. (6): for a head with
attention A (rows = queries), the average slash score at lag delta is
``E_prompts[ 1/#valid * sum_i A[i, i - delta] ]``, where entries that involve positions 0..3 (the
paper's 1..4, sink and warm-up tokens) are dropped. A head is kappa slash-dominant at delta when the
score >= kappa: short range delta in 0..4 with kappa = 0.1; long range 500 <= delta <= 5000 with
kappa = 1e-3 (App. C). The expectation is a mean over prompts of per-prompt means.
"""

from __future__ import annotations

import pandas as pd
import torch
from jaxtyping import Float

SKIP = 4  # positions 0..SKIP-1 are excluded (paper 004: "positions 1-4")


def valid_counts(n_pos: int, skip: int = SKIP) -> Float[torch.Tensor, "delta"]:
    """``[delta]`` number of entries ``A[i, i - delta]`` with ``i - delta >= skip``: ``max(0, N - delta - skip)``."""
    return (n_pos - skip - torch.arange(n_pos, dtype=torch.float64)).clamp(min=0)


def prompt_slash(lag_sum: Float[torch.Tensor, "head delta"], n_pos: int, skip: int = SKIP) -> dict[str, torch.Tensor]:
    """One prompt's contribution: per-prompt mean at each lag and a 0/1 'prompt counted' per lag.

    Args:
        lag_sum: ``[head, delta]`` sums over queries of ``A[i, i - delta]`` with keys < ``skip`` zeroed.
    """
    cnt = valid_counts(n_pos, skip)
    ok = cnt > 0
    mean = torch.where(ok, lag_sum.double() / cnt.clamp(min=1), torch.zeros((), dtype=torch.float64))
    return {"slash_mean_sum": mean, "slash_prompts": ok.double()}


def slash_scores(state) -> Float[torch.Tensor, "layer head delta"]:
    """Average slash score at every lag (NaN where no prompt was long enough)."""
    n = state["slash_prompts"]
    return state["slash_mean_sum"] / torch.where(n > 0, n, torch.nan)


def slash_from_pattern(A: Float[torch.Tensor, "head q_pos k_pos"], skip: int = SKIP) -> Float[torch.Tensor, "head delta"]:
    """Reference: per-lag mean of ``A[i, i - delta]`` over ``i - delta >= skip`` from a full pattern."""
    H, N, _ = A.shape
    out = torch.full((H, N), torch.nan, dtype=torch.float64)
    for d in range(N - skip):
        out[:, d] = torch.diagonal(A, offset=-d, dim1=1, dim2=2)[:, skip:].double().mean(dim=1)
    return out


def sdh_columns(scores: Float[torch.Tensor, "layer head delta"], lags: range, kappa: float, prefix: str, flag: str) -> dict[str, torch.Tensor]:
    """Best lag in ``lags`` per head (``{prefix}delta``), its score (``{prefix}score``) and ``flag`` = score >= kappa.

    Lags beyond the scanned length are ignored; a head with no valid lag gets NaN / False.
    """
    L, H, n = scores.shape
    lo, hi = lags.start, min(lags.stop, n)
    if hi <= lo:
        nan = torch.full((L, H), torch.nan, dtype=torch.float64)
        return {f"{prefix}score": nan, f"{prefix}delta": nan, flag: torch.zeros(L, H, dtype=torch.bool)}
    best, arg = torch.nan_to_num(scores[..., lo:hi], nan=-1.0).max(dim=-1)
    best = torch.where(best < 0, torch.nan, best)
    return {f"{prefix}score": best, f"{prefix}delta": (arg + lo).double(), flag: best >= kappa}


def lag_table(scores: Float[torch.Tensor, "layer head delta"], lags: range) -> pd.DataFrame:
    """Tidy ``(layer, head, delta, slash_score)`` rows for the given lags (those that fit)."""
    L, H, n = scores.shape
    deltas = [d for d in lags if d < n]
    sub = scores[..., deltas]
    idx = pd.MultiIndex.from_product([range(L), range(H), deltas], names=["layer", "head", "delta"])
    return pd.DataFrame({"slash_score": sub.reshape(-1).numpy()}, index=idx).reset_index()
