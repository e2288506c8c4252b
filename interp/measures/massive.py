"""Massive values: per-channel norms of q and k (pre and post RoPE) and of v, and the channels that stand out.

Jin et al., "Massive Values in Self-Attention Modules are the Key to Contextual Knowledge Understanding" (ICML 2025,
arXiv 2502.01563; code ``MingyuJ666/Rope_with_LLM``). Their quantity, for one layer and one prompt, is the L2 norm
over the sequence of every (head, channel) entry of Q (and of K, V):

    M[h, d] = || Q[:, h, d] ||_2 = sqrt(sum_i Q[i, h, d]^2)                     (paper Sec. 3, "M in R^{H x D}")

computed in the repository exactly so: ``matrix = query_states.norm(dim=1).squeeze(0)`` on the post-RoPE
``[batch, pos, head, d_head]`` states (``modeling_llama.py``, ``LlamaFlashAttention2.forward``, right after
``apply_rotary_pos_emb``; ``attn.ipynb`` plots ``attn_weights.norm(dim=1)`` of the saved q/k/v as its Fig. 1). An
entry is *massive* when it exceeds lambda times the mean over the head's channels:

    massive[h, d]  <=>  M[h, d] > lambda * (1/D) sum_d' M[h, d']                (paper Sec. 3; lambda = 5 there)

(the definition is the paper's; the repository's "destruction" code instead takes a fixed number of top channels
per head, ``torch.topk(outlier, k)`` with k = 1 for Llama, 3 for Qwen2, 22 for Gemma-2; ``interp`` uses the paper's
threshold rule, ``massive_lambda`` = 5 by default, for the counts and for its intervention,
``interp.hooks.intervene.massive_intervention``).

Over several prompts ``interp`` keeps the sums of squares ``sum_i x[i, h, d]^2`` (additive, so shards merge exactly),
so M is the norm over all positions of all prompts; for one prompt it is Jin et al.'s M. The rule is scale-free, so
the number of tokens does not move the threshold. Channels are grouped into RoPE planes with the model's pairing
(``interp.rope.plane_channels``; plane 0 = highest frequency); a plane's energy ``sum_i ||x_i^(l)||^2`` is the same
before and after RoPE (a rotation), but how it splits between the plane's two channels is not, so pre- and
post-RoPE counts can differ. The values ``v`` have no rotation: their "plane" is the plane the same channel index
would have, which is what Jin et al.'s figures show for V (channel index on the axis).

State (float64, additive): ``massive_sq_q [layer, 2, head, d_head]`` and ``massive_sq_k [layer, 2, kv_head, d_head]``
(sums of squares pre-RoPE (0) and post-RoPE (1)), ``massive_sq_v [layer, kv_head, d_head]``, ``massive_sum_q``,
``massive_sum_k`` (sums of the post-RoPE values, for the channel means the intervention writes) and
``massive_tokens [1]`` (positions summed). Optional (``--measure massive``); off by default.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import torch
from jaxtyping import Bool, Float

from interp.measures.base import Column, Entry, Measure, Option, kv_index
from interp.rope import plane_channels

KINDS = ("q_pre", "q_rot", "k_pre", "k_rot", "v")  # the channel norms the measure keeps, in table order


def channel_plane(d_head: int, pairing: str = "rotate_half") -> torch.Tensor:
    """``[d_head]`` long: the rotation plane of every channel (0 = highest frequency) under ``pairing``.

    Raises:
        ValueError: as ``interp.rope.plane_channels`` (unknown pairing, odd ``d_head``).
    """
    ch = plane_channels(d_head, pairing)  # [freq, 2]
    out = torch.empty(d_head, dtype=torch.long)
    out[ch[:, 0]] = torch.arange(ch.shape[0])
    out[ch[:, 1]] = torch.arange(ch.shape[0])
    return out


def massive_mask(M: Float[torch.Tensor, "... d_head"], lam: float = 5.0) -> Bool[torch.Tensor, "... d_head"]:
    """Jin et al.'s rule: ``M[..., d] > lam * mean_d M[..., d]`` along the last (channel) axis.

    Args:
        M: channel norms (any units; the rule is scale-free), channels on the last axis.
        lam: the threshold lambda (paper: 5).

    Raises:
        ValueError: ``lam`` not positive.
    """
    if not lam > 0:
        raise ValueError(f"massive_lambda must be > 0, got {lam}")
    return M > lam * M.mean(-1, keepdim=True)


def channel_norms(s, kind: str) -> Float[torch.Tensor, "layer head d_head"]:
    """``M = sqrt(sum over positions of x^2)`` per layer, head (kv head for k and v) and channel, from a scan's state.

    Args:
        s: a ``ScanResult`` (or anything with ``state``) that ran the ``massive`` measure.
        kind: one of ``KINDS``: ``q_pre``, ``q_rot``, ``k_pre``, ``k_rot``, ``v``.

    Raises:
        KeyError: the state has no ``massive`` entries (scan with ``--measure massive``); ValueError: unknown kind.
    """
    st = s.state
    if "massive_sq_q" not in st:
        raise KeyError("no massive-value sums in this result: scan with ScanConfig(massive=True) (--measure massive)")
    if kind == "v":
        return st["massive_sq_v"].sqrt()
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    x, when = kind.split("_")
    return st[f"massive_sq_{x}"][:, 0 if when == "pre" else 1].sqrt()


def channel_means(s, x: str) -> Float[torch.Tensor, "layer head d_head"]:
    """Mean over all positions of every post-RoPE channel of ``x`` = ``"q"`` (``[layer, head, d_head]``) or ``"k"``
    (``[layer, kv_head, d_head]``): the values Jin et al.'s destruction writes (``massive_intervention``)."""
    return s.state[f"massive_sum_{x}"] / s.state["massive_tokens"][0]


def channel_table(s, lam: float | None = None) -> pd.DataFrame:
    """One row per (kind, layer, head, channel): ``norm`` (M), ``ratio`` (M over the head's mean over channels),
    ``massive`` (Jin et al.'s rule with ``lam``, default the scan's ``massive_lambda``), ``plane`` (0 = highest
    frequency) and ``inv_freq`` (radians per position of the plane, first layer's RoPE where layers differ: see
    ``interp.models.arch.rope_specs``; filled in by callers that know the specs, else NaN). Heads of k and v are kv heads."""
    lam = float(s.config.massive_lambda if lam is None else lam)
    card = s.card
    plane = channel_plane(card.d_head, card.pairing).numpy()
    frames = []
    for kind in KINDS:
        M = channel_norms(s, kind)
        L, H, D = M.shape
        ratio = M / M.mean(-1, keepdim=True)
        mass = massive_mask(M, lam)
        li, hi, ci = np.meshgrid(np.arange(L), np.arange(H), np.arange(D), indexing="ij")
        frames.append(pd.DataFrame({"kind": kind, "layer": li.ravel(), "head": hi.ravel(), "channel": ci.ravel(),
                                    "plane": plane[ci.ravel()], "norm": M.numpy().ravel(), "ratio": ratio.numpy().ravel(),
                                    "massive": mass.numpy().ravel()}))
    return pd.concat(frames, ignore_index=True)


def _low_share(mask: Bool[torch.Tensor, "layer head d_head"], plane: torch.Tensor, n_freq: int) -> torch.Tensor:
    """Share of the massive channels that lie in the low-frequency third of the planes (NaN where none is massive);
    thirds as ``interp.rope.band_planes``: ``numpy.array_split(arange(freq), 3)``."""
    low = torch.as_tensor(np.array_split(np.arange(n_freq), 3)[2])
    in_low = torch.isin(plane, low)  # [d_head]
    n = mask.sum(-1).double()
    k = (mask & in_low).sum(-1).double()
    return torch.where(n > 0, k / n.clamp(min=1), torch.full_like(n, math.nan))


class Massive(Measure):
    """Per-channel norms of q, k (pre/post RoPE) and v, and Jin et al.'s massive channels (module docstring)."""

    name = "massive"
    summary = "per-channel norms of q, k (pre/post RoPE) and v; massive channels and their RoPE plane (Jin et al. 2025)"
    options = (Option("massive", False, "also the per-channel norms of q, k, v and the massive channels of Jin et al. "
                                        "(ICML 2025): M[h,d] > massive_lambda x mean_d M[h,d]"),
               Option("massive_lambda", 5.0, "threshold lambda of the massive-channel rule (Jin et al.: 5)",
                      check=lambda v: None if v > 0 else f"massive_lambda must be > 0, got {v}", convert=float))
    switch = "massive"

    def columns(self, cfg):
        lam = getattr(cfg, "massive_lambda", 5.0)
        rule = f"M[h,d] = ||x[:,h,d]||_2 > {lam:g} x mean_d M[h,d] (Jin et al. 2025, Sec. 3)"
        cols = []
        for x, what in (("q", "post-RoPE queries"), ("k", "post-RoPE keys (the head's kv head)"), ("v", "values (the head's kv head)")):
            cols.append(Column(f"massive_{x}_count", f"massive channels of the {what}: {rule}"))
        for x, what in (("q", "pre-RoPE queries"), ("k", "pre-RoPE keys")):
            cols.append(Column(f"massive_{x}_pre_count", f"massive channels of the {what}: same rule"))
        for x, what in (("q", "post-RoPE queries"), ("k", "post-RoPE keys"), ("v", "values")):
            cols.append(Column(f"massive_{x}_ratio", f"largest channel's magnitude over the mean channel's, {what}: max_d M[h,d] / mean_d M[h,d] (Jin et al. 2025)"))
        for x, what in (("q", "queries"), ("k", "keys")):
            cols.append(Column(f"massive_{x}_plane", f"RoPE plane (0 = highest frequency) of the post-RoPE {what}' largest-norm channel"))
            cols.append(Column(f"massive_{x}_low_share", f"share of the massive post-RoPE {what} channels in the low-frequency third "
                                                         "of the planes (NaN: none)"))
        return cols

    def entries(self, dims, cfg):
        L, H, K, D = dims.n_layers, dims.n_heads, dims.n_kv_heads, dims.d_head
        return [Entry("massive_sq_q", (L, 2, H, D)), Entry("massive_sq_k", (L, 2, K, D)), Entry("massive_sq_v", (L, K, D)),
                Entry("massive_sum_q", (L, H, D)), Entry("massive_sum_k", (L, K, D)),
                Entry("massive_tokens", (1,), layer_axis=None)]

    def update(self, x):
        if x.value is None:
            raise ValueError("the massive measure needs the layer's values (LayerInput.value); this engine passed none")
        sq = lambda t: t.double().pow(2).sum(0)  # noqa: E731  [pos, head, d] -> [head, d]
        return {"massive_sq_q": torch.stack([sq(x.q_pre), sq(x.q_rot)]), "massive_sq_k": torch.stack([sq(x.k_pre), sq(x.k_rot)]),
                "massive_sq_v": sq(x.value), "massive_sum_q": x.q_rot.double().sum(0), "massive_sum_k": x.k_rot.double().sum(0)}

    def update_prompt(self, x):
        return {"massive_tokens": torch.tensor([float(x.n_pos)], dtype=torch.float64)}

    def compute(self, s):
        lam = float(s.config.massive_lambda)
        card = s.card
        kv = kv_index(card)
        plane = channel_plane(card.d_head, card.pairing)
        n_freq = card.d_head // 2
        M = {kind: channel_norms(s, kind) for kind in KINDS}
        mask = {kind: massive_mask(m, lam) for kind, m in M.items()}
        heads = lambda t, x: t if x == "q" else t[:, kv]  # noqa: E731  kv heads -> query heads
        out = {}
        for x, kind in (("q", "q_rot"), ("k", "k_rot"), ("v", "v")):
            out[f"massive_{x}_count"] = heads(mask[kind].sum(-1).double(), x)
        for x in ("q", "k"):
            out[f"massive_{x}_pre_count"] = heads(mask[f"{x}_pre"].sum(-1).double(), x)
        for x, kind in (("q", "q_rot"), ("k", "k_rot"), ("v", "v")):
            m = M[kind]
            out[f"massive_{x}_ratio"] = heads(m.max(-1).values / m.mean(-1), x)
        for x in ("q", "k"):
            m = M[f"{x}_rot"]
            out[f"massive_{x}_plane"] = heads(plane[m.argmax(-1)].double(), x)
            out[f"massive_{x}_low_share"] = heads(_low_share(mask[f"{x}_rot"], plane, n_freq), x)
        return {c.name: out[c.name] for c in self.columns(s.config)}
