"""Average slash score and slash-dominant heads (SDH).

Source: paper 004 (Cheng, Zhang, Hou et al. 2026), Definition 3.1, eq. (6): for a head with
attention A (rows = queries), the average slash score at lag delta is
``E_prompts[ 1/#valid * sum_i A[i, i - delta] ]``, where entries that involve positions 0..3 (the
paper's 1..4, sink and warm-up tokens) are dropped. A head is kappa slash-dominant at delta when the
score >= kappa: short range delta in 0..4 with kappa = 0.1; long range 500 <= delta <= 5000 with
kappa = 1e-3 (App. C). The expectation is a mean over prompts of per-prompt means.

Long-range consistency rule (this project; motivated by 004 App. C and Table 6, which check long-range
SDHs on random-token prompts): a mean over prompts lets one prompt whose text repeats a passage d
tokens later (copied by induction-like heads) outrank every positional slash. So per prompt and lag
the state also counts the prompts whose own score is >= kappa_long (``long_hits``), with the sum of
those prompts' scores and ids (which name the prompt when it is the only one) and the sum of squared
per-prompt scores (spread). A long lag counts as slash-dominant only when it holds in at least
``long_min_frac`` (default 2/3) of the prompts that reach it (``consistent_long_columns``).
"""

from __future__ import annotations

import pandas as pd
import torch
from jaxtyping import Float

SKIP = 4  # positions 0..SKIP-1 are excluded (paper 004: "positions 1-4")


def valid_counts(n_pos: int, skip: int = SKIP) -> Float[torch.Tensor, "delta"]:
    """``[delta]`` number of entries ``A[i, i - delta]`` with ``i - delta >= skip``: ``max(0, N - delta - skip)``."""
    return (n_pos - skip - torch.arange(n_pos, dtype=torch.float64)).clamp(min=0)


def prompt_slash(lag_sum: Float[torch.Tensor, "head delta"], n_pos: int, skip: int = SKIP, kappa_long: float | None = None,
                 prompt_id: int = 0) -> dict[str, torch.Tensor]:
    """One prompt's additive contribution to the slash state.

    Args:
        lag_sum: ``[head, delta]`` sums over queries of ``A[i, i - delta]`` with keys < ``skip`` zeroed.
        n_pos: the prompt's length; skip: positions dropped (0..3).
        kappa_long: if given, also the per-prompt long-range entries (see module docstring).
        prompt_id: the prompt's global index (recorded where it is slash-dominant, to name content repeats).

    Returns:
        ``slash_mean_sum [head, delta]`` (this prompt's mean ``A[i, i - delta]``), ``slash_prompts [delta]``
        (1 where the lag has entries), and with ``kappa_long``: ``slash_sq_sum`` (squared mean),
        ``long_hits`` (1 where the mean >= kappa_long), ``long_hit_score`` (the mean there),
        ``long_hit_prompt`` (``prompt_id`` there), all ``[head, delta]`` float64.
    """
    cnt = valid_counts(n_pos, skip)
    ok = cnt > 0
    mean = torch.where(ok, lag_sum.double() / cnt.clamp(min=1), torch.zeros((), dtype=torch.float64))
    out = {"slash_mean_sum": mean, "slash_prompts": ok.double()}
    if kappa_long is not None:
        hit = (mean >= kappa_long) & ok
        out.update(slash_sq_sum=mean**2, long_hits=hit.double(), long_hit_score=torch.where(hit, mean, 0.0),
                   long_hit_prompt=hit.double() * float(prompt_id))
    return out


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


def consistent_long_columns(state, lags: range, kappa: float, min_frac: float) -> dict[str, torch.Tensor]:
    """Long-range SDH columns under the consistency rule (module docstring), one value per (layer, head).

    A lag in ``lags`` is *consistent* when the fraction of prompts (among those long enough to reach it)
    whose own score is >= ``kappa`` is >= ``min_frac``. Returns ``long_slash_score`` / ``long_slash_delta``
    (best mean score among consistent lags; NaN where a head has none), ``long_slash_prompt_frac`` (the
    fraction at that lag), ``is_sdh_long`` (a consistent lag with mean >= kappa), and the unfiltered best lag
    (``long_any_slash_score``, ``long_any_slash_delta``, ``long_any_prompt_frac``: the pre-rule definition,
    kept to show content repeats). All ``[layer, head]``; NaN / False when ``lags`` is empty.

    Raises:
        KeyError: the state has no per-prompt long-range entries (it was written by an older interp; rescan).
    """
    scores = slash_scores(state)
    if "long_hits" not in state:
        raise KeyError("this scan's state has no per-prompt long-range counts (written by an older interp); rescan it")
    L, H, n = scores.shape
    lo, hi = lags.start, min(lags.stop, n)
    nan = torch.full((L, H), torch.nan, dtype=torch.float64)
    if hi <= lo:
        return {"long_slash_score": nan, "long_slash_delta": nan, "long_slash_prompt_frac": nan, "is_sdh_long": torch.zeros(L, H, dtype=torch.bool),
                "long_any_slash_score": nan, "long_any_slash_delta": nan, "long_any_prompt_frac": nan}
    sc = scores[..., lo:hi]
    frac = state["long_hits"][..., lo:hi] / state["slash_prompts"][lo:hi].clamp(min=1)
    out = {}
    for tag, eligible in (("long_slash", frac >= min_frac - 1e-12), ("long_any_slash", torch.ones_like(frac, dtype=torch.bool))):
        best, arg = torch.where(eligible, sc.nan_to_num(nan=-1.0), -1.0).max(dim=-1)
        none = best < 0
        out[f"{tag}_score"] = torch.where(none, torch.nan, best)
        out[f"{tag}_delta"] = torch.where(none, torch.nan, (arg + lo).double())
        f = frac.gather(-1, arg[..., None])[..., 0]
        out["long_slash_prompt_frac" if tag == "long_slash" else "long_any_prompt_frac"] = torch.where(none, torch.nan, f)
    out["is_sdh_long"] = out["long_slash_score"].nan_to_num(nan=-1.0) >= kappa
    return out


def lag_table(scores: Float[torch.Tensor, "layer head delta"], lags: range) -> pd.DataFrame:
    """Tidy ``(layer, head, delta, slash_score)`` rows for the given lags (those that fit)."""
    L, H, n = scores.shape
    deltas = [d for d in lags if d < n]
    sub = scores[..., deltas]
    idx = pd.MultiIndex.from_product([range(L), range(H), deltas], names=["layer", "head", "delta"])
    return pd.DataFrame({"slash_score": sub.reshape(-1).numpy()}, index=idx).reset_index()
