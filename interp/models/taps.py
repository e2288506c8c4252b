"""Taps on every attention call of a HF model: post-RoPE q/k/v, the model's scale, window, soft-cap and RoPE tables.

``attention_taps(model, handler)`` is a context manager. Inside it, each attention layer's call
reaches ``handler(call)`` with an ``AttentionCall``:

- ``query`` ``[pos, head, d_head]``, ``key`` / ``value`` ``[pos, kv_head, d_head]``: exactly what
  the model hands its attention function (post-RoPE, after any QK-norm and bias), batch 1;
- ``scale``, ``window``, ``softcap``: what the model passes with them (``module.scaling`` where
  the call passes none; GPT-J: ``1 / sqrt(d_head)``);
- ``cos`` / ``sin`` ``[pos, rot]``: the model's own RoPE tables for that layer, so ``call.pre()``
  returns the pre-RoPE vectors (``interp.rope.unrotate_tables``);
- ``call.default()``: the layer's normal attention (the implementation the model was set to, e.g.
  ``eager`` for patterns), returning ``(out [pos, head, d_head], weights [head, q_pos, k_pos] | None)``.

The handler returns the layer's output ``[pos, head, d_head]`` (or None for ``call.default()``'s).
Families that use transformers' ``AttentionInterface`` are tapped by a registered attention function
(``interp_tap``); GPT-J by wrapping its ``_attn`` method. Everything is restored on exit.

Imports ``interp.models.arch``, ``interp.rope``, ``interp.errors``.
"""

from __future__ import annotations

import contextvars
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface, sdpa_mask
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from interp.models.arch import attention_modules, family, gptj_tables
from interp.errors import ShapeError
from interp.rope import unrotate_tables

ATTN_NAME = "interp_tap"


@dataclass
class AttentionCall:
    """One attention layer's call during a forward (batch 1); see the module docstring.

    Attributes:
        layer: layer index.
        query: ``[pos, head, d_head]`` post-RoPE queries. key/value: ``[pos, kv_head, d_head]``.
        scale: logit scale. window: sliding window (key j visible from i iff ``0 <= i - j < window``) or None.
        softcap: logit soft-cap ``c`` (``c tanh(x / c)``) or None.
        cos, sin: ``[pos, rot]`` RoPE tables of this layer, per channel. pairing: the model's pairing.
    """

    layer: int
    query: torch.Tensor
    key: torch.Tensor
    value: torch.Tensor
    scale: float
    window: int | None
    softcap: float | None
    cos: torch.Tensor
    sin: torch.Tensor
    pairing: str
    default: Callable[[], tuple[torch.Tensor, torch.Tensor | None]]

    def pre(self, query: torch.Tensor | None = None, key: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(q_pre [pos, head, d_head], k_pre [pos, kv_head, d_head])`` float32: RoPE undone with the model's tables.

        ``query`` / ``key``: float32 copies of the call's own (a caller that holds them already saves unrotating from
        16-bit values, which copies them to float32 once more)."""
        q = self.query if query is None else query
        k = self.key if key is None else key
        return unrotate_tables(q, self.cos, self.sin, self.pairing), unrotate_tables(k, self.cos, self.sin, self.pairing)


Handler = Callable[[AttentionCall], "torch.Tensor | None"]


class _Tap:
    def __init__(self, handler: Handler, layers: dict[int, int], pairing: str, delegate: Callable | None,
                 editor: Callable | None = None):
        self.handler, self.layers, self.pairing, self.delegate, self.editor = handler, layers, pairing, delegate, editor
        self.tables: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}


_ACTIVE: contextvars.ContextVar["_Tap | None"] = contextvars.ContextVar("interp_tap", default=None)


def _first(t: torch.Tensor) -> torch.Tensor:
    """``[1, head, pos, d]`` -> ``[pos, head, d]``."""
    if t.shape[0] != 1:
        raise ShapeError(f"interp taps one prompt at a time (batch 1); got a batch of {t.shape[0]}")
    return t[0].transpose(0, 1)


def _interface_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, sliding_window=None,
                         softcap=None, **kw):
    """Registered as ``interp_tap``: hands the call to the active tap (pass-through to sdpa outside one)."""
    tap = _ACTIVE.get()
    if tap is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kw)
    layer = tap.layers[id(module)]
    cos, sin = tap.tables.pop(layer)
    # an edit block (interp.hooks.edit) may be active: the tap sees the edited q, k, v; run() is the edited layer
    editor = tap.editor
    seen = editor.prepare_inputs(module, query, key, value) if editor is not None else (query, key, value)
    ran = []

    def run():  # the layer's normal attention: (out [batch, pos, head, d], weights [batch, head, q, k] | None)
        ran.append(True)
        kws = dict(scaling=scaling, dropout=dropout, sliding_window=sliding_window, softcap=softcap, **kw)
        if editor is not None:
            return editor.run_edited(tap.delegate or editor.inner(module), module, query, key, value, attention_mask, **kws)
        return tap.delegate(module, query, key, value, attention_mask, **kws)

    def default():
        out, w = run()
        return out[0], (None if w is None else w[0])

    call = AttentionCall(layer, _first(seen[0]), _first(seen[1]), _first(seen[2]),
                         float(scaling if scaling is not None else module.scaling), sliding_window, softcap, cos, sin,
                         tap.pairing, default)
    out = tap.handler(call)
    if out is None:
        return run()
    if editor is not None and not ran:
        editor.check_tapped(module)  # edits that the tap's own attention cannot honour raise here
    return out.to(query.dtype)[None], None


AttentionInterface.register(ATTN_NAME, _interface_attention)
AttentionMaskInterface.register(ATTN_NAME, sdpa_mask)


def attention_function(attn: torch.nn.Module, impl: str) -> Callable:
    """The attention function the model would call under ``impl``: its modeling file's eager one, or a registered one."""
    if impl == "eager":
        return getattr(sys.modules[type(attn).__module__], "eager_attention_forward")
    return ALL_ATTENTION_FUNCTIONS[impl]


def _table_hook(tap: _Tap, layer: int, gptj: bool):
    """Forward pre-hook of an attention module: keep this layer's RoPE tables for its attention call."""
    def hook(module, args, kwargs):
        if gptj:
            pos = kwargs.get("position_ids")
            n = (args[0] if args else kwargs["hidden_states"]).shape[1]
            pos = pos[0] if pos is not None else torch.arange(n)
            tap.tables[layer] = gptj_tables(module, pos)
        else:
            cos, sin = kwargs["position_embeddings"]
            tap.tables[layer] = (cos[0], sin[0])
    return hook


def _gptj_attn(tap: _Tap, module: torch.nn.Module, layer: int, original: Callable):
    """Replacement of GPT-J's ``_attn(query, key, value, attention_mask)`` (tensors ``[batch, head, pos, d]``)."""
    def _attn(query, key, value, attention_mask=None):
        cos, sin = tap.tables.pop(layer)

        def default():
            out, w = original(query, key, value, attention_mask)
            return out[0].transpose(0, 1), w[0]

        call = AttentionCall(layer, _first(query), _first(key), _first(value), 1.0 / float(module.scale_attn), None, None,
                             cos, sin, tap.pairing, default)
        out = tap.handler(call)
        if out is None:
            return original(query, key, value, attention_mask)
        return out.to(value.dtype).transpose(0, 1)[None], None
    return _attn


@contextmanager
def attention_taps(model, handler: Handler, *, implementation: str | None = None) -> Iterator[None]:
    """Route every attention call of ``model`` (a ``LoadedModel`` or HF model) through ``handler`` while inside.

    Args:
        model: ``interp.models.LoadedModel`` or a HF causal LM.
        handler: ``AttentionCall -> out [pos, head, d_head] | None`` (None: the layer's normal attention).
        implementation: what ``call.default()`` runs: ``"eager"``, ``"sdpa"``..., default the model's current one.

    Raises:
        UnsupportedModelError: see ``interp.models.arch.family``.
    """
    hf = getattr(model, "hf", model)
    fam = family(hf)
    mods = attention_modules(hf)
    impl = implementation or hf.config._attn_implementation or "sdpa"
    if impl == ATTN_NAME:
        raise RuntimeError("attention taps do not nest")
    # an attention function that edits (interp.hooks.edit's, found by its prepare_inputs) stays in the loop: the tap
    # sees its edited q, k, v and the layer's default is the edited attention over the chosen implementation
    current = ALL_ATTENTION_FUNCTIONS.get(hf.config._attn_implementation or "sdpa")
    editor = current if hasattr(current, "prepare_inputs") else None
    # unrotate_tables reads the rotary width from the tables, so the family's base pairing is all it needs
    gptj = fam.call == "gptj"  # its _attn is the eager path; the tap wraps it, no delegate needed
    delegate = None if gptj or (editor is not None and implementation is None) else attention_function(mods[0], impl)
    tap = _Tap(handler, {id(m): i for i, m in enumerate(mods)}, fam.pairing, delegate, editor)
    handles = [m.register_forward_pre_hook(_table_hook(tap, i, gptj), with_kwargs=True) for i, m in enumerate(mods)]
    previous = hf.config._attn_implementation
    token = _ACTIVE.set(tap)
    try:
        if gptj:
            for i, m in enumerate(mods):
                m._attn = _gptj_attn(tap, m, i, m._attn)
        else:
            # the mask the delegate expects (eager: additive float, sdpa: boolean or None for plain causal)
            AttentionMaskInterface.register(ATTN_NAME, ALL_MASK_ATTENTION_FUNCTIONS[impl] if impl in ALL_MASK_ATTENTION_FUNCTIONS else sdpa_mask)
            hf.set_attn_implementation(ATTN_NAME)
        yield
    finally:
        _ACTIVE.reset(token)
        for h in handles:
            h.remove()
        if gptj:
            for m in mods:
                del m._attn  # the instance attribute; the class method shows through again
        else:
            hf.set_attn_implementation(previous)
