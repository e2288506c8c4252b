"""Norm statistics: relative variation of query/key norms (paper 004) and key norm by position (paper 001).

- Norm relative variation: ``std_i ||x_i|| / mean_i ||x_i||`` over all tokens of all prompts
  (population std), from sums of norms, squared norms and counts.
- Key norm of token 0 over the mean key norm of the other tokens (sink keys; paper 001, Sec. sinks).
"""

from __future__ import annotations

import torch
from jaxtyping import Float


def norm_sums(x: Float[torch.Tensor, "pos head d_head"]) -> dict[str, torch.Tensor]:
    """``[3, head]``: sum of norms, sum of squared norms, token count."""
    n = x.float().norm(dim=-1).double()  # norms in float32 (relative error ~1e-7), sums in float64
    return torch.stack([n.sum(0), (n**2).sum(0), torch.full_like(n[0], n.shape[0])])


def relative_variation(s: Float[torch.Tensor, "... 3 head"]) -> torch.Tensor:
    """``std / mean`` of norms from ``norm_sums`` (summed over prompts)."""
    total, sq, cnt = s[..., 0, :], s[..., 1, :], s[..., 2, :]
    mean = total / cnt
    var = (sq / cnt - mean**2).clamp(min=0)
    return var.sqrt() / mean


def first_key_norm(k: Float[torch.Tensor, "pos kv_head d_head"]) -> torch.Tensor:
    """``[2, kv_head]``: norm of key 0 and mean norm of keys 1.. (one prompt)."""
    n = k.float().norm(dim=-1).double()
    rest = n[1:].mean(0) if n.shape[0] > 1 else torch.full_like(n[0], torch.nan)
    return torch.stack([n[0], rest])
