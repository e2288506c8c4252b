"""Capture pre- and post-RoPE queries and keys (and the values) of one prompt, and the model's own attention.

Values are read at each layer's attention call (``interp.models.taps``), so capture works the same on every
covered family (``interp.models.arch``):

- ``q_rot`` / ``k_rot``: what the model hands its attention function (post-RoPE, after any QK-norm and bias);
- ``q_pre`` / ``k_pre``: the same vectors with the model's own cos/sin tables undone (exact up to float
  rounding; the tests check them against each family's projections computed from its weights, and
  against TransformerLens' ``hook_q``/``hook_k`` where the bridge has them);
- ``patterns``: the model's own *eager* attention probabilities, from its modeling file's eager function.

- ``v``: the values, as the model hands them to its attention function.

Everything is returned in the canonical layout ``[pos, head, d_head]`` (keys and values per ``kv_head``), float32.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import torch
from jaxtyping import Float

from interp.attention import attention_pattern, expand_kv
from interp.errors import PromptError, ShapeError
from interp.models import LoadedModel
from interp.models.taps import AttentionCall, attention_taps

__all__ = ["Capture", "capture", "expand_kv", "verify_attention", "as_tokens"]


@dataclass
class Capture:
    """Per-layer queries and keys of one prompt, canonical layout.

    Attributes:
        tokens: ``[pos]`` token ids.
        q_pre, q_rot: per layer ``[pos, head, d_head]`` before / after RoPE.
        k_pre, k_rot: per layer ``[pos, kv_head, d_head]`` before / after RoPE.
        patterns: per layer ``[head, q_pos, k_pos]`` model's own attention, if captured.
        v: per layer ``[pos, kv_head, d_head]`` values, exactly what the model hands its attention function (no RoPE).
    """

    tokens: torch.Tensor
    q_pre: list[torch.Tensor]
    k_pre: list[torch.Tensor]
    q_rot: list[torch.Tensor]
    k_rot: list[torch.Tensor]
    patterns: list[torch.Tensor] | None = None
    v: list[torch.Tensor] | None = None

    @property
    def n_layers(self) -> int:
        """Number of layers captured."""
        return len(self.q_pre)


def as_tokens(model: LoadedModel, tokens, *, beyond_context: bool = False) -> torch.Tensor:
    """``[pos]`` int64 token ids from a string, list or tensor; checks vocabulary and context length.

    Args:
        beyond_context: allow prompts longer than the model's context (positions out of distribution).

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
    if tokens.numel() > card.context_length and not beyond_context:
        raise PromptError(
            f"prompt has {tokens.numel()} tokens but {card.name} accepts at most {card.context_length}; shorten it"
        )
    if int(tokens.min()) < 0 or int(tokens.max()) >= card.vocab_size:
        raise PromptError(f"token ids must lie in [0, {card.vocab_size}) for {card.name}")
    return tokens


def capture(model: LoadedModel, tokens, *, patterns: bool = False, beyond_context: bool = False) -> Capture:
    """Run one prompt through the model and return every layer's pre/post-RoPE q and k.

    Args:
        model: a loaded model.
        tokens: a string, or ``[pos]`` / ``[1, pos]`` token ids.
        patterns: also keep the model's own eager attention ``[head, q_pos, k_pos]`` (O(pos^2) memory;
            the forward then runs the eager implementation).
        beyond_context: allow a prompt longer than the model's context.

    Raises:
        PromptError / ShapeError: see ``as_tokens``.
        UnsupportedModelError: see ``interp.models.arch.family``.
    """
    toks = as_tokens(model, tokens, beyond_context=beyond_context)
    L = model.card.n_layers
    got: dict[str, list] = {k: [None] * L for k in ("q_pre", "k_pre", "q_rot", "k_rot", "v", "patterns")}

    def keep(call: AttentionCall) -> torch.Tensor:
        got["q_pre"][call.layer], got["k_pre"][call.layer] = call.pre()
        got["q_rot"][call.layer], got["k_rot"][call.layer] = call.query.float(), call.key.float()
        got["v"][call.layer] = call.value.float()
        out, weights = call.default()
        if patterns:
            got["patterns"][call.layer] = weights.float()
        return out

    with torch.no_grad(), attention_taps(model, keep, implementation="eager" if patterns else None):
        model.hf.base_model(toks[None].to(model.device), use_cache=False)
    return Capture(tokens=toks, q_pre=got["q_pre"], k_pre=got["k_pre"], q_rot=got["q_rot"], k_rot=got["k_rot"],
                   patterns=got["patterns"] if patterns else None, v=got["v"])


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
