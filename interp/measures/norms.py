"""Norm statistics: relative variation of query/key norms (paper 004) and key norm by position (paper 001).

- Norm relative variation: ``std_i ||x_i|| / mean_i ||x_i||`` over all tokens of all prompts
  (population std), from sums of norms, squared norms and counts.
- Key norm of token 0 over the mean key norm of the other tokens (sink keys; paper 001, Sec. sinks).
"""

from __future__ import annotations

import torch
from jaxtyping import Float

from interp.measures.base import Column, Entry, Measure, kv_index, prompt_count


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


class Norms(Measure):
    """Relative variation of query and key norms (004) and the norm of key 0 against the others (001)."""

    name = "norms"
    summary = "norm relative variation of pre-RoPE Q and K (004) and key-0 norm ratio (001)"

    def columns(self, cfg):
        return [Column("norm_rv_q", "norm relative variation std_i ||q_i|| / mean_i ||q_i|| of pre-RoPE queries (004)"),
                Column("norm_rv_k", "norm relative variation of pre-RoPE keys (004)"),
                Column("key0_norm_ratio", "first key's norm over the others' mean: ||k_0|| / mean_{j>0} ||k_j||, mean over prompts of each term (001, sinks)")]

    def entries(self, dims, cfg):
        L, H, K = dims.n_layers, dims.n_heads, dims.n_kv_heads
        return [Entry("norm_q", (L, 3, H)), Entry("norm_k", (L, 3, K)), Entry("key0_norm", (L, 2, K))]

    def update(self, x):
        return {"norm_q": norm_sums(x.q_pre), "norm_k": norm_sums(x.k_pre), "key0_norm": first_key_norm(x.k_pre)}

    def compute(self, s):
        st, kv = s.state, kv_index(s.card)
        k0 = st["key0_norm"] / prompt_count(s)
        return {"norm_rv_q": relative_variation(st["norm_q"]), "norm_rv_k": relative_variation(st["norm_k"])[:, kv],
                "key0_norm_ratio": (k0[:, 0] / k0[:, 1])[:, kv]}
