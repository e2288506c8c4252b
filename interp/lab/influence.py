"""Leave-one-out influential far tokens and the losses of paper 003, Sec. 5.3 and App. F (Fig. 2).

Paper 003 (Golowich et al., "The Role of Sparsity for Length Generalization in LLMs") asks whether a model's
prediction of the last token of a length-``L_bar`` window depends on the tokens more than ``L`` positions back
only through a few (``k``) of them. With the window ``X_1..X_Lbar`` (1-based, as in the paper):

- the *far* tokens are ``X_1..X_{Lbar-L-1}`` (App. F: ``j in [Lbar - L - 1]``, 63 for ``Lbar = 128, L = 64``;
  ``X_{Lbar-L}`` is the first of the ``L`` short-window tokens ``X_{Lbar-L}..X_{Lbar-1}``);
- ``J_1..J_k`` are the ``k`` far positions ``j`` that MINIMISE ``h(X_Lbar | X_{1:j-1}, X_{j+1:Lbar-1})``
  (App. F, eq. 22: the tokens whose removal hurts most; the paper's "argmax" wording is a slip);
- ``L_short = -log h(X_Lbar | X_{Lbar-L:Lbar-1})``, ``L_long = -log h(X_Lbar | X_{1:Lbar-1})`` and
  ``L_short,sparse = -log h(X_Lbar | X_{J_1..J_k}, X_{Lbar-L:Lbar-1})`` (App. F, the display after eq. 22);
- Fig. 2 plots ``(L_short - L_long, L_short - L_short,sparse)`` per example and finds them near ``x = y``
  (App. F's axis order; the caption swaps the axes).

"Removing" a token means masking it out of every attention computation while every other token keeps its
position id (App. F: "token X_j is masked out in all attention computations"; Fig. 6 shades masked tokens).
Here that is a 4-D attention mask handed to the Hugging Face model, which transformers 5 uses as-is
(``masking_utils._preprocess_mask_arguments`` returns a 4-D mask untouched). A removed token still attends to
itself, so its own row of the softmax is never empty (an empty row would give NaN, and NaN values times a zero
weight would leak NaN into every other row); nothing else ever reads its state. A BOS token, where the model
has one, is never removed (it is the attention sink, not text).

Positions below are 0-based indices into ``input_ids``; with ``n_bos`` leading BOS tokens (0 or 1), the paper's
``X_i`` sits at index ``n_bos + i - 1``.

Works on Hugging Face decoders whose only cross-position operation is full (not sliding-window) causal
attention with the ``sdpa`` or ``eager`` implementation, that take a 4-D ``attention_mask``, explicit
``position_ids``, ``logits_to_keep`` and (for the search) a ``DynamicCache``: Llama (smollm2), Qwen2, Qwen3,
Mistral without a window. Tested on tiny-llama and smollm2-135m.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

__all__ = ["attention_keep_mask", "masked_logits", "dropped_logits", "leave_one_out_logprobs", "influential_tokens",
           "FarTokenLosses", "far_token_losses", "window_layout"]


def _check_model(hf) -> str:
    """The model's attention implementation; ValueError where a 4-D keep-mask cannot express token removal."""
    cfg = hf.config.get_text_config(decoder=True) if hasattr(hf.config, "get_text_config") else hf.config
    impl = getattr(cfg, "_attn_implementation", None) or "eager"
    if impl not in ("sdpa", "eager"):
        raise ValueError(f"token removal needs sdpa or eager attention (a 4-D mask); the model uses {impl!r}: "
                         f"call hf.set_attn_implementation('sdpa') first")
    types = set(getattr(cfg, "layer_types", None) or ["full_attention"])
    if types != {"full_attention"} or getattr(cfg, "sliding_window", None) and getattr(cfg, "use_sliding_window", True):
        raise ValueError(f"token removal needs full causal attention in every layer; this model has {sorted(types)} "
                         f"layers / sliding_window={getattr(cfg, 'sliding_window', None)} (one 4-D mask cannot serve both)")
    return impl


def _check_ids(input_ids: torch.Tensor, keep: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    if input_ids.ndim != 2 or input_ids.shape[1] < 1:
        raise ValueError(f"input_ids must be [batch, pos] with pos >= 1; got shape {tuple(input_ids.shape)}")
    if keep is None:
        keep = torch.ones_like(input_ids, dtype=torch.bool)
    if keep.shape != input_ids.shape or keep.dtype != torch.bool:
        raise ValueError(f"keep must be a bool tensor shaped like input_ids {tuple(input_ids.shape)}; "
                         f"got {keep.dtype} {tuple(keep.shape)}")
    return input_ids, keep


def attention_keep_mask(keep: torch.Tensor, *, q_start: int = 0, implementation: str = "sdpa",
                        dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """4-D attention mask that removes the tokens with ``keep == False`` from every attention computation.

    Query ``q`` (absolute index ``q_start + row``) may read key ``s`` iff ``s <= q`` (causal) and
    (``keep[b, s]`` or ``s == q``): a removed token is read by no other token, but reads itself so that its
    own softmax row is never empty (see the module docstring). Positions (RoPE ids) are not touched.

    Args:
        keep: ``[batch, kv]`` bool, True for tokens that stay visible; ``kv`` counts cached + new tokens.
        q_start: absolute index of the first query (the number of tokens already in a KV cache).
        implementation: ``"sdpa"`` -> bool mask (True = attend), ``"eager"`` -> additive float mask
            (0 / ``finfo(dtype).min``), the two 4-D formats transformers 5 passes through unchanged.
        dtype: float dtype of the additive mask (eager only).

    Returns:
        ``[batch, 1, kv - q_start, kv]`` mask.

    Raises:
        ValueError: ``keep`` not a 2-D bool tensor, ``q_start`` outside ``[0, kv)``, unknown implementation.
    """
    if keep.ndim != 2 or keep.dtype != torch.bool:
        raise ValueError(f"keep must be a [batch, kv] bool tensor; got {keep.dtype} {tuple(keep.shape)}")
    kv = keep.shape[1]
    if not 0 <= q_start < kv:
        raise ValueError(f"q_start must lie in [0, {kv}); got {q_start}")
    if implementation not in ("sdpa", "eager"):
        raise ValueError(f"implementation must be 'sdpa' or 'eager'; got {implementation!r}")
    q = torch.arange(q_start, kv, device=keep.device)[:, None]
    s = torch.arange(kv, device=keep.device)[None, :]
    allowed = (s <= q) & (keep[:, None, :] | (s == q))  # [batch, q, kv]
    allowed = allowed[:, None]
    if implementation == "sdpa":
        return allowed
    return torch.zeros(allowed.shape, dtype=dtype, device=keep.device).masked_fill(~allowed, torch.finfo(dtype).min)


@torch.no_grad()
def masked_logits(hf, input_ids: torch.Tensor, keep: torch.Tensor | None = None, *, last_only: bool = False) -> torch.Tensor:
    """Logits with the tokens ``keep == False`` removed from every attention computation, positions unchanged.

    Args:
        hf: a Hugging Face causal LM (see the module docstring for the families that qualify).
        input_ids: ``[batch, pos]`` int64.
        keep: ``[batch, pos]`` bool (None: keep all, i.e. the plain causal forward).
        last_only: return only the last position's logits.

    Returns:
        ``[batch, pos, vocab]`` float logits (``[batch, vocab]`` with ``last_only``). Rows at removed positions
        are the removed token's own (self-only) prediction: meaningless, but finite.

    Raises:
        ValueError: bad shapes or dtypes, or a model whose attention cannot take a 4-D mask.
    """
    impl = _check_model(hf)
    input_ids, keep = _check_ids(input_ids, keep)
    keep = keep.to(input_ids.device)
    pos = torch.arange(input_ids.shape[1], device=input_ids.device).expand_as(input_ids)
    mask = attention_keep_mask(keep, implementation=impl, dtype=hf.dtype)
    out = hf(input_ids=input_ids, attention_mask=mask, position_ids=pos, use_cache=False,
             logits_to_keep=1 if last_only else 0)
    return out.logits[:, -1] if last_only else out.logits


@torch.no_grad()
def dropped_logits(hf, input_ids: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """Reference for :func:`masked_logits`: the removed tokens are deleted from the input, and the kept ones
    get their original position ids explicitly.

    The plain all-ones 2-D attention mask matters: with ``attention_mask=None`` and no cache, transformers 5
    reads position ids that jump by more than 1 as packed sequences and cuts attention at every gap
    (``masking_utils.find_packed_sequence_indices``; measured: logits off by 0.5 on tiny-llama).

    Args:
        hf: a Hugging Face causal LM.
        input_ids: ``[batch, pos]`` int64.
        keep: ``[batch, pos]`` bool with the same number ``n_kept`` of True entries in every row.

    Returns:
        ``[batch, n_kept, vocab]`` logits at the kept positions, in order.

    Raises:
        ValueError: bad shapes, or rows keeping different numbers of tokens.
    """
    input_ids, keep = _check_ids(input_ids, keep)
    n = keep.sum(1)
    if (n != n[0]).any() or n[0] == 0:
        raise ValueError(f"every row must keep the same, positive number of tokens; got {n.tolist()}")
    b = input_ids.shape[0]
    pos = torch.arange(input_ids.shape[1], device=input_ids.device).expand_as(input_ids)
    ids, p = input_ids[keep].view(b, -1), pos[keep.to(input_ids.device)].view(b, -1)
    out = hf(input_ids=ids, position_ids=p, attention_mask=torch.ones_like(ids), use_cache=False)
    return out.logits


@torch.no_grad()
def leave_one_out_logprobs(hf, input_ids: torch.Tensor, target: int, candidates: Sequence[int], *,
                           keep: torch.Tensor | None = None, batch_size: int = 8) -> torch.Tensor:
    """``log h(target | input_ids with token j removed)`` at the last position, for every candidate ``j``.

    This is the quantity App. F, eq. 22 minimises (as a log, which does not change the argmin). Exact, but
    batched: candidates are sorted and taken ``batch_size`` at a time; the tokens before the smallest
    candidate ``a`` of a batch do not depend on which later token is removed (causality), so their keys and
    values come from one cached forward and only tokens ``a..pos-1`` are recomputed, ``batch_size`` rows at once
    (about 20% fewer token-forwards than recomputing everything for 63 candidates out of 127 tokens).

    Args:
        hf: a Hugging Face causal LM (see the module docstring).
        input_ids: ``[pos]`` or ``[1, pos]`` int64, the context (the target itself not included).
        target: the token id whose log-probability is scored at the last position.
        candidates: distinct indices in ``[0, pos - 1)`` to remove one at a time (the last token is the query).
        keep: ``[pos]`` bool tokens visible in every run (None: all); each candidate must be kept there.
        batch_size: rows per forward.

    Returns:
        ``[len(candidates)]`` float64 log-probabilities, in the order of ``candidates``.

    Raises:
        ValueError: bad shapes, candidates out of range, repeated or not kept, batch_size < 1.
    """
    impl = _check_model(hf)
    ids = input_ids.view(1, -1) if input_ids.ndim == 1 else input_ids
    ids, keep = _check_ids(ids, None if keep is None else keep.view(1, -1))
    if ids.shape[0] != 1:
        raise ValueError(f"input_ids must hold one sequence; got batch {ids.shape[0]}")
    n = ids.shape[1]
    cand = [int(j) for j in candidates]
    if not cand or len(set(cand)) != len(cand) or min(cand) < 0 or max(cand) >= n - 1:
        raise ValueError(f"candidates must be distinct indices in [0, {n - 1}); got {cand}")
    if not bool(keep[0, cand].all()):
        raise ValueError("every candidate must be visible in keep (removing a removed token changes nothing)")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1; got {batch_size}")
    from transformers import DynamicCache

    dev = ids.device
    keep = keep.to(dev)
    full = hf(input_ids=ids, attention_mask=attention_keep_mask(keep, implementation=impl, dtype=hf.dtype),
              position_ids=torch.arange(n, device=dev)[None], use_cache=True, logits_to_keep=1)
    layers = [(layer.keys, layer.values) for layer in full.past_key_values.layers]
    order = sorted(range(len(cand)), key=lambda i: cand[i])
    out = torch.empty(len(cand), dtype=torch.float64)
    for start in range(0, len(order), batch_size):
        idx = order[start:start + batch_size]
        js = torch.tensor([cand[i] for i in idx], device=dev)
        c, a = len(idx), int(js.min())
        rows = keep.expand(c, n).clone()
        rows[torch.arange(c, device=dev), js] = False
        cache = None
        if a > 0:  # shared prefix: keys/values of tokens 0..a-1, identical for every row of this batch
            cache = DynamicCache([(k[:, :, :a].expand(c, -1, -1, -1), v[:, :, :a].expand(c, -1, -1, -1)) for k, v in layers],
                                 config=hf.config)
        res = hf(input_ids=ids[:, a:].expand(c, -1), position_ids=torch.arange(a, n, device=dev).expand(c, -1),
                 attention_mask=attention_keep_mask(rows, q_start=a, implementation=impl, dtype=hf.dtype),
                 past_key_values=cache, use_cache=cache is not None, logits_to_keep=1)
        out[idx] = torch.log_softmax(res.logits[:, -1].double(), -1)[:, target].cpu()
    return out


def influential_tokens(logprobs: torch.Tensor, candidates: Sequence[int], k: int) -> list[int]:
    """The ``k`` candidates whose removal gives the LOWEST target probability (App. F, eq. 22: an argmin).

    Args:
        logprobs: ``[n_candidates]`` from :func:`leave_one_out_logprobs`.
        candidates: the ``n_candidates`` indices they belong to.
        k: how many to pick.

    Returns:
        ``k`` indices, most influential first (ties broken by the smaller index, via a stable sort).

    Raises:
        ValueError: ``k`` outside ``[1, n_candidates]`` or mismatched lengths.
    """
    if logprobs.ndim != 1 or logprobs.shape[0] != len(candidates):
        raise ValueError(f"logprobs must be [{len(candidates)}]; got {tuple(logprobs.shape)}")
    if not 1 <= k <= len(candidates):
        raise ValueError(f"k must lie in [1, {len(candidates)}]; got {k}")
    order = torch.sort(logprobs, stable=True).indices[:k]
    return [int(candidates[i]) for i in order]


def window_layout(n_tokens: int, L: int, n_bos: int = 0) -> tuple[list[int], list[int], int]:
    """Indices of the far candidates, the short window and the target in a window of ``n_bos + L_bar`` tokens.

    With ``L_bar = n_tokens - n_bos``: far = ``X_1..X_{Lbar-L-1}``, short = ``X_{Lbar-L}..X_{Lbar-1}`` (``L``
    tokens), target = ``X_Lbar`` (App. F), as 0-based indices shifted by ``n_bos``.

    Raises:
        ValueError: ``L < 1`` or ``L_bar < L + 2`` (no far token), ``n_bos`` not 0 or 1.
    """
    if n_bos not in (0, 1):
        raise ValueError(f"n_bos must be 0 or 1; got {n_bos}")
    lbar = n_tokens - n_bos
    if L < 1 or lbar < L + 2:
        raise ValueError(f"need L >= 1 and L_bar >= L + 2 (at least one far token); got L={L}, L_bar={lbar}")
    far = list(range(n_bos, n_bos + lbar - L - 1))
    short = list(range(n_bos + lbar - L - 1, n_bos + lbar - 1))
    return far, short, n_bos + lbar - 1


@dataclass
class FarTokenLosses:
    """One example's App. F numbers (nats). ``J`` and ``random`` are 0-based indices into the window."""

    l_short: float
    l_long: float
    l_short_sparse: float
    l_short_random: float
    l_short_first: float  # -log h(X_Lbar | X_1, X_{Lbar-L:Lbar-1}): the short window plus the first far token only
    J: list[int]
    random: list[int]
    loo_logprobs: np.ndarray  # [n_far] log h(X_Lbar | all but X_j), far order


@torch.no_grad()
def far_token_losses(hf, window: torch.Tensor, L: int, k: int, *, n_bos: int = 0,
                     rng: np.random.Generator | None = None, batch_size: int = 8) -> FarTokenLosses:
    """``L_short``, ``L_long``, ``L_short,sparse`` (App. F) and a random-``k`` control for one window.

    Args:
        hf: a Hugging Face causal LM (see the module docstring).
        window: ``[n_bos + L_bar]`` int64 token ids; the last one is the target ``X_Lbar``. With ``n_bos = 1``
            index 0 is BOS, which is visible in every run.
        L: short context length (paper: 64); ``L_bar = len(window) - n_bos`` (paper: 128).
        k: number of influential tokens (paper: 5).
        rng: draws the ``k`` random far tokens of the control ``L_short,random`` (None: seed 0).
        batch_size: rows per forward of the leave-one-out search.

    Returns:
        FarTokenLosses; the losses come from one batched masked forward (rows long / short / sparse / random /
        first). ``l_short_first`` is an extra control, not in the paper: without BOS, ``X_1`` is the attention sink
        of a model trained on sequences that start anywhere, and its removal alone may explain much of the gap.

    Raises:
        ValueError: bad shapes, ``L`` or ``k`` out of range (``k`` at most the number of far tokens).
    """
    if window.ndim != 1:
        raise ValueError(f"window must be [pos]; got shape {tuple(window.shape)}")
    far, short, t = window_layout(window.shape[0], L, n_bos)
    if not 1 <= k <= len(far):
        raise ValueError(f"k must lie in [1, {len(far)}] (the far tokens); got {k}")
    rng = np.random.default_rng(0) if rng is None else rng
    ctx, target = window[:t], int(window[t])
    lp = leave_one_out_logprobs(hf, ctx, target, far, batch_size=batch_size)
    J = influential_tokens(lp, far, k)
    R = sorted(int(j) for j in rng.choice(far, size=k, replace=False))
    keep = torch.zeros(5, t, dtype=torch.bool)
    keep[0] = True  # long: everything
    keep[1:, short] = True
    keep[1:, :n_bos] = True  # BOS stays
    keep[2, J] = True
    keep[3, R] = True
    keep[4, far[0]] = True
    logits = masked_logits(hf, ctx.view(1, -1).expand(5, -1), keep.to(window.device), last_only=True)
    nll = -torch.log_softmax(logits.double(), -1)[:, target].cpu()
    return FarTokenLosses(l_long=float(nll[0]), l_short=float(nll[1]), l_short_sparse=float(nll[2]),
                          l_short_random=float(nll[3]), l_short_first=float(nll[4]), J=J, random=R, loo_logprobs=lp.numpy())
