"""Cone alignment of queries and keys (paper 001, Fig. 2), from sums of unit vectors.

Per prompt and head, with unit vectors x_hat_i and S = sum_i x_hat_i over N tokens:

- mean pairwise cosine over pairs i != j: ``(||S||^2 - N) / (N (N - 1))`` (K-K and Q-Q);
- mean query-key cosine over all pairs: ``(S_q . S_k) / (N_q N_k)`` (K-Q);
- angle (degrees) between the mean query direction S_q and the mean key direction S_k.

Each is averaged over prompts (per-prompt values summed, then divided by the prompt count).
"""

from __future__ import annotations

import math

import torch
from jaxtyping import Float

from interp.attention import check_qk
from interp.measures.base import Column, Entry, Measure, prompt_count


def unit_sum(x: Float[torch.Tensor, "pos head d_head"]) -> Float[torch.Tensor, "head d_head"]:
    """``S = sum_i x_i / ||x_i||`` (zero vectors contribute nothing).

    Summed in float32 as one batched product ``sum_i x_i (1 / ||x_i||)`` (no normalised copy of ``x``: two passes
    over it, not four; relative error ~1e-7 * sqrt N) and returned as float64.
    """
    x = x.float()
    inv = x.norm(dim=-1).clamp(min=1e-30).reciprocal()  # [pos, head]
    return torch.einsum("phd,ph->hd", x, inv).double()


def cone_values(q: Float[torch.Tensor, "pos head d_head"], k: Float[torch.Tensor, "pos kv_head d_head"]) -> torch.Tensor:
    """``[4, head]``: cos QQ, cos KK, cos QK, angle(mean q, mean k) in degrees, for one prompt.

    ``k`` may hold kv heads (query head h reads kv head ``h // (head / kv_head)``) or be expanded already.

    Raises:
        ShapeError: ``head`` is not a multiple of ``kv_head`` or pos / d_head differ.
    """
    check_qk(q, k)
    N, H = q.shape[0], q.shape[1]
    sq = unit_sum(q)
    sk = unit_sum(k).repeat_interleave(H // k.shape[1], dim=0)  # unit sums of a kv head serve its query heads
    pair = N * (N - 1) if N > 1 else math.nan
    qq = ((sq * sq).sum(-1) - N) / pair
    kk = ((sk * sk).sum(-1) - N) / pair
    qk = (sq * sk).sum(-1) / (N * N)
    cos = (sq * sk).sum(-1) / (sq.norm(dim=-1) * sk.norm(dim=-1)).clamp(min=1e-30)
    return torch.stack([qq, kk, qk, torch.rad2deg(torch.arccos(cos.clamp(-1, 1)))])


def cone_from_pairs(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Reference by an explicit pairwise loop (tests only): same ``[4, head]`` as ``cone_values``."""
    N, H, _ = q.shape
    out = torch.zeros(4, H, dtype=torch.float64)
    qn = torch.nn.functional.normalize(q.double(), dim=-1)
    kn = torch.nn.functional.normalize(k.double(), dim=-1)
    for h in range(H):
        qq = kk = qk = 0.0
        for i in range(N):
            for j in range(N):
                qk += float(qn[i, h] @ kn[j, h])
                if i != j:
                    qq += float(qn[i, h] @ qn[j, h])
                    kk += float(kn[i, h] @ kn[j, h])
        mq, mk = qn[:, h].mean(0), kn[:, h].mean(0)
        ang = math.degrees(math.acos(max(-1.0, min(1.0, float(mq @ mk / (mq.norm() * mk.norm()))))))
        out[:, h] = torch.tensor([qq / (N * (N - 1)), kk / (N * (N - 1)), qk / (N * N), ang])
    return out


class Cone(Measure):
    """Mean pairwise cosines of queries and keys and the angle of their mean directions, pre and post RoPE (001 Fig. 2)."""

    name = "cone"
    summary = "mean pairwise cosines Q-Q, K-K, Q-K and the mean-direction angle, pre and post RoPE (001 Fig. 2)"

    def columns(self, cfg):
        out = []
        for tag, when in (("pre", "pre-RoPE"), ("rot", "post-RoPE")):
            out += [Column(f"cos_qq_{tag}", f"mean pairwise cosine Q-Q over pairs i != j, {when} (001 Fig. 2)", compare=tag == "pre"),
                    Column(f"cos_kk_{tag}", f"mean pairwise cosine K-K over pairs i != j, {when} (001 Fig. 2)", compare=tag == "pre"),
                    Column(f"cos_qk_{tag}", f"mean cosine Q-K over all pairs, {when} (001 Fig. 2)", compare=True),
                    Column(f"qk_angle_{tag}", f"angle (degrees) between the mean q and mean k directions, {when} (001)")]
        return out

    def entries(self, dims, cfg):
        return [Entry("cone_pre", (dims.n_layers, 4, dims.n_heads)), Entry("cone_rot", (dims.n_layers, 4, dims.n_heads))]

    def update(self, x):
        return {"cone_pre": cone_values(x.q_pre, x.k_pre), "cone_rot": cone_values(x.q_rot, x.k_rot)}

    def compute(self, s):
        out = {}
        for tag in ("pre", "rot"):
            c = s.state[f"cone_{tag}"] / prompt_count(s)
            for i, name in enumerate(("cos_qq", "cos_kk", "cos_qk", "qk_angle")):
                out[f"{name}_{tag}"] = c[:, i]
        return out
