"""Average attention map of the first positions: ``mean_prompts A[:M, :M]`` per head (for reports)."""

from __future__ import annotations

import torch

from interp.attention import Block


def block_map(block: Block, size: int) -> torch.Tensor | None:
    """``[head, M, M]`` contribution of one block to the top-left ``M x M`` map, or None if it has no row < M."""
    if block.i0 >= size:
        return None
    H = block.probs_rev.shape[0]
    out = torch.zeros(H, size, size, dtype=torch.float64, device=block.probs_rev.device)
    rows = min(size, block.i1) - block.i0
    cols = min(size, block.i1)
    # column m of probs_rev is key i1-1-m: keys 0..cols-1 are the last `cols` columns, reversed
    part = block.probs_rev[:, :rows, block.i1 - cols :].flip(-1)
    out[:, block.i0 : block.i0 + rows, :cols] = part.double()
    return out
