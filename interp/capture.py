"""Capture pre- and post-RoPE queries and keys of one prompt through the TransformerBridge.

Hook points read (TransformerLens names; ``L`` is the layer):

- ``blocks.L.attn.hook_q`` / ``hook_k``: ``[batch, pos, head|kv_head, d_head]`` projections (bias included).
- ``blocks.L.attn.hook_q_normed`` / ``hook_k_normed`` (Gemma-3 QK-norm): ``[batch, head, pos, d_head]``.
  Where present these are what RoPE rotates, so they are the pre-RoPE vectors.
- ``blocks.L.attn.hook_rot_q`` / ``hook_rot_k``: ``[batch, pos, head|kv_head, d_head]`` after RoPE.
- ``blocks.L.attn.hook_pattern``: ``[batch, head, q_pos, k_pos]`` the model's eager probabilities.

Everything is returned in the canonical layout ``[pos, head, d_head]`` (keys per ``kv_head``).
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import torch
from jaxtyping import Float

from interp.attention import attention_pattern, expand_kv
from interp.errors import PromptError, ShapeError
from interp.models import LoadedModel

__all__ = ["Capture", "capture", "expand_kv", "verify_attention", "as_tokens"]


@dataclass
class Capture:
    """Per-layer queries and keys of one prompt, canonical layout.

    Attributes:
        tokens: ``[pos]`` token ids.
        q_pre, q_rot: per layer ``[pos, head, d_head]`` before / after RoPE.
        k_pre, k_rot: per layer ``[pos, kv_head, d_head]`` before / after RoPE.
        patterns: per layer ``[head, q_pos, k_pos]`` model's own attention, if captured.
    """

    tokens: torch.Tensor
    q_pre: list[torch.Tensor]
    k_pre: list[torch.Tensor]
    q_rot: list[torch.Tensor]
    k_rot: list[torch.Tensor]
    patterns: list[torch.Tensor] | None = None

    @property
    def n_layers(self) -> int:
        """Number of layers captured."""
        return len(self.q_pre)


def as_tokens(model: LoadedModel, tokens) -> torch.Tensor:
    """``[pos]`` int64 token ids from a string, list or tensor; checks vocabulary and context length.

    Raises:
        PromptError: empty prompt, ids outside the vocabulary, or longer than the model's context.
        ShapeError: a tensor with more than one non-trivial axis.
    """
    if isinstance(tokens, str):
        ids = model.tokenizer(tokens, add_special_tokens=False)["input_ids"]
        if model.bos_token_id is not None:
            ids = [model.bos_token_id] + ids
        tokens = torch.tensor(ids, dtype=torch.long)
    tokens = torch.as_tensor(tokens, dtype=torch.long)
    if tokens.dim() == 2 and tokens.shape[0] == 1:
        tokens = tokens[0]
    if tokens.dim() != 1:
        raise ShapeError(f"expected one prompt of token ids [pos] (or [1, pos]); got shape {tuple(tokens.shape)}")
    card = model.card
    if tokens.numel() == 0:
        raise PromptError("empty prompt: pass at least one token")
    if tokens.numel() > card.context_length:
        raise PromptError(
            f"prompt has {tokens.numel()} tokens but {card.name} accepts at most {card.context_length}; shorten it"
        )
    if int(tokens.min()) < 0 or int(tokens.max()) >= card.vocab_size:
        raise PromptError(f"token ids must lie in [0, {card.vocab_size}) for {card.name}")
    return tokens


def capture(model: LoadedModel, tokens, *, patterns: bool = False) -> Capture:
    """Run one prompt through the bridge and return every layer's pre/post-RoPE q and k.

    Args:
        model: a loaded model (its ``bridge`` is booted on first use).
        tokens: a string, or ``[pos]`` / ``[1, pos]`` token ids.
        patterns: also keep the model's eager attention patterns ``[head, q_pos, k_pos]`` (O(pos^2) memory).

    Raises:
        PromptError / ShapeError: see ``as_tokens``.
    """
    toks = as_tokens(model, tokens)
    bridge = model.bridge
    qk_norm = model.card.qk_norm
    wanted = ("hook_q_normed", "hook_k_normed") if qk_norm else ("hook_q", "hook_k")
    wanted += ("hook_rot_q", "hook_rot_k") + (("hook_pattern",) if patterns else ())

    def keep(name: str) -> bool:
        return name.startswith("blocks.") and name.rsplit(".", 1)[-1] in wanted

    with torch.no_grad():
        _, cache = bridge.run_with_cache(toks[None].to(model.device), names_filter=keep)

    def get(layer: int, hook: str) -> torch.Tensor:
        t = cache[f"blocks.{layer}.attn.{hook}"][0]
        return t.transpose(0, 1) if hook.endswith("_normed") else t  # normed hooks are [head, pos, d]

    L = model.card.n_layers
    return Capture(
        tokens=toks,
        q_pre=[get(l, wanted[0]) for l in range(L)],
        k_pre=[get(l, wanted[1]) for l in range(L)],
        q_rot=[get(l, "hook_rot_q") for l in range(L)],
        k_rot=[get(l, "hook_rot_k") for l in range(L)],
        patterns=[get(l, "hook_pattern") for l in range(L)] if patterns else None,
    )


def recompute_pattern(model: LoadedModel, cap: Capture, layer: int) -> Float[torch.Tensor, "head q_pos k_pos"]:
    """Attention of every head of ``layer`` recomputed from ``q_rot``/``k_rot`` with the model's scale and masks."""
    c = model.card
    return attention_pattern(cap.q_rot[layer], cap.k_rot[layer], c.attn_scale[layer], c.sliding_window[layer], c.softcap)


def verify_attention(model: LoadedModel, tokens, *, atol: float = 1e-4) -> pd.DataFrame:
    """Compare the recomputed attention of every head with the model's own eager pattern.

    Recomputes from captured ``q_rot``/``k_rot`` with the model's scale, causal and sliding-window
    masks, soft-capping and GQA/MQA mapping, so the statistics use the probabilities the model uses.

    Returns:
        DataFrame, one row per layer: ``layer``, ``max_abs_diff`` (over heads, queries, keys),
        ``sliding_window``, ``ok`` (``max_abs_diff <= atol``). ``df.attrs["ok"]`` is True when all are.
    """
    cap = capture(model, tokens, patterns=True)
    rows = []
    for layer in range(cap.n_layers):
        ref = cap.patterns[layer].float()
        got = recompute_pattern(model, cap, layer)
        if got.shape != ref.shape:
            raise ShapeError(f"layer {layer}: recomputed pattern {tuple(got.shape)} vs model's {tuple(ref.shape)}")
        diff = float((got - ref).abs().max())
        window = model.card.sliding_window[layer]
        rows.append({"layer": layer, "max_abs_diff": diff, "sliding_window": "-" if window is None else window, "ok": diff <= atol})
    df = pd.DataFrame(rows)
    df.attrs["ok"] = bool(df["ok"].all())
    return df
