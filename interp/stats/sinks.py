"""Attention sinks (paper 001; Gu et al. 2024, "When Attention Sink Emerges").

- Sink weight: mean over queries of ``A[i, 0]`` -- with RoPE (what the model does) and the pre-RoPE
  counterfactual (softmax of ``q_pre . k_pre`` with the same scale, mask and soft-cap).
- Importance of token 0 (Gu et al.): mean of ``A[i, 0]`` over the queries that can see it, which for
  token 0 is every query, so it equals the sink weight; a head *has a sink* when it exceeds
  epsilon = 0.3. The sink rate of a model is the fraction of heads that have one.

Per-prompt means are summed over prompts, then divided by the prompt count.
"""

from __future__ import annotations

import torch

SINK_EPS = 0.3


def sink_flag(weight: torch.Tensor, eps: float = SINK_EPS) -> torch.Tensor:
    """True where the importance of token 0 exceeds ``eps`` (Gu et al. 2024)."""
    return weight > eps
