"""Echo score on periodic prompts: the attention a head puts on the same position in earlier copies (RazorAttention).

Source: Tang et al. 2024, "RazorAttention: Efficient KV Cache Compression Through Retrieval Heads" (arXiv
2407.15891), Sec. 3.3: on a prompt of random tokens repeated several times (BOS, r, r, r, r), an *echo head*
attends to the same token in the earlier copies and an *induction head* to the token after it. Their released
mask (``_get_score_mask``) marks, for a query ``i`` in copy ``c >= 1``, the keys ``i - m n`` (``m = 1..c``, period
``n``); the induction keys are the next positions. ``interp`` uses the same echo pairs on prompts of the form
``prefix, r, r, ...`` (the period and prefix are read from the prompt's tokens, ``period``) and TransformerLens'
normalisation (``detect_head``'s ``mul``: the attention on the marked pairs summed over queries, divided by the
number of queries ``pos``, averaged over prompts), so that ``echo_score`` sits beside ``duplicate_token_score`` and
``induction_score`` of ``interp.measures.token_match`` on the same scale:

    echo_score = mean over periodic prompts of (1 / pos) sum_{i} sum_{m >= 1, i - m n >= s} A[i, i - m n]

with ``s`` the prefix length (1 for a BOS). RazorAttention's code takes the mean over all ``pos^2`` entries,
which is ``echo_score / pos``: the ranking of heads is the same. On repeated *random* tokens the echo pairs are
almost exactly the duplicate-token pairs (TransformerLens: earlier keys with the same token id); the two differ
only where a token repeats inside ``r`` by chance (at ``n`` tokens from a vocabulary of ``V``, about ``n^2 / 2V``
pairs), so ``echo_score <= duplicate_token_score`` up to those.

Exact, streaming: the ``(K - 1) K / 2 * n`` echo pairs of a prompt with ``K`` copies are recomputed from the rotated
q/k and the engine's row log-sum-exp (product ``lse``; ``interp.attention.probs_at``), never the ``pos x pos`` map.
State: ``echo_sum [layer, head]`` (per-prompt scores summed) and ``echo_prompts [1]`` (prompts with a period).
A prompt without a period (text) adds nothing and is not counted; the column is NaN when no prompt had one.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import torch
from jaxtyping import Float

from interp.attention import probs_at
from interp.measures.base import Column, Entry, Measure, Option


def period(tokens: torch.Tensor) -> tuple[int, int] | None:
    """``(s, n)``: the smallest period ``n`` of the prompt after a prefix of ``s`` tokens (``s`` = 0 or 1: a BOS), such
    that ``tokens[s + n:] == tokens[s:-n]`` and the repeat spans at least half a copy (``pos - s - n >= n / 2``: the
    last copy of ``interp.corpus``'s repeated-random prompts may be cut short); ``None`` if none.

    Args:
        tokens: ``[pos]`` token ids.
    """
    t = tokens.reshape(-1).cpu().numpy().astype(np.int64)
    return _period(t.tobytes())  # every layer of a prompt asks: computed once


@lru_cache(maxsize=8)
def _period(raw: bytes) -> tuple[int, int] | None:
    t = np.frombuffer(raw, dtype=np.int64)
    N = t.size
    for s in (0, 1):
        for n in range(1, 2 * (N - s) // 3 + 1):
            if np.array_equal(t[s + n:], t[s:N - n]):
                return s, n
    return None


def echo_pairs(n_pos: int, s: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(qi, kj)`` ``[pairs]``: every query ``i >= s + n`` with each key ``i - m n >= s`` (``m >= 1``), the positions of
    the query's token in the earlier copies (RazorAttention's echo mask, offset by the prefix ``s``)."""
    i = torch.arange(s + n, n_pos)
    copies = (i - s) // n  # earlier copies each query sees
    m_max = int(copies.max()) if i.numel() else 0
    m = torch.arange(1, m_max + 1)
    qi, mm = torch.broadcast_tensors(i[:, None], m[None, :])
    keep = mm <= copies[:, None]
    return qi[keep], (qi - mm * n)[keep]


def echo_sums(x, s: int, n: int) -> Float[torch.Tensor, "head"]:
    """``[head]`` float64: ``sum over echo pairs of A[i, j]`` for one layer of one prompt (``x``: a ``LayerInput`` with the
    ``lse`` product), exact from q, k and the row log-sum-exp."""
    qi, kj = echo_pairs(x.n_pos, s, n)
    if not qi.numel():
        return torch.zeros(x.q_rot.shape[1], dtype=torch.float64, device=x.q_rot.device)
    return probs_at(x.q_rot, x.k_rot, x.products["lse"], qi, kj, x.scale, x.window, x.softcap).sum(-1)


class Echo(Measure):
    """Echo score on periodic prompts (module docstring; RazorAttention Sec. 3.3)."""

    name = "echo"
    summary = "echo score: attention on the same position in earlier copies of a repeated prompt (RazorAttention)"
    options = (Option("echo", False, "also the echo score on periodic prompts (--corpus repeated-random; RazorAttention's "
                      "echo heads)"),)
    switch = "echo"
    products = ("lse",)

    def columns(self, cfg):
        return [Column("echo_score", "share of attention on the query's position in earlier copies of a repeated prompt, "
                       "sum_i sum_m A[i, i - m n] / pos, mean over periodic prompts (RazorAttention Sec. 3.3)")]

    def entries(self, dims, cfg):
        return [Entry("echo_sum", (dims.n_layers, dims.n_heads)), Entry("echo_prompts", (1,), layer_axis=None)]

    def update(self, x):
        p = period(x.tokens) if x.tokens is not None else None
        if p is None:
            return {}
        return {"echo_sum": echo_sums(x, *p) / x.n_pos}

    def update_prompt(self, x):
        periodic = x.tokens is not None and period(x.tokens) is not None
        return {"echo_prompts": torch.tensor([float(periodic)], dtype=torch.float64)}

    def compute(self, s):
        count = s.state["echo_prompts"][0]
        score = s.state["echo_sum"] / count if count > 0 else torch.full_like(s.state["echo_sum"], float("nan"))
        return {"echo_score": score}
