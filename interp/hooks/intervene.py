"""Causal interventions on the model's rotation: run the model itself with a RoPE variant in chosen layers.

``rope_intervention(model, variant, layers)`` replaces, for the duration of a ``with`` block, the
``(cos, sin)`` tables that each chosen attention layer receives (``position_embeddings``, the ``rope`` site of
``interp.hooks.edit``) by the
variant's: ``cos(angle)``, ``sin(angle)`` per rotation plane, written into the channels of the model's
pairing, times the layer's own RoPE scaling and ``sqrt(variant.logit_scale(n))`` (applied to both q
and k, so logits scale by ``logit_scale``: RoPE-ID's attention temperature). The angles come from the
layer's own ``RopeSpec`` (``interp.rope.rope_specs``), so models with several rotary tables (Gemma-3:
local base 1e4, global 1e6) are changed per layer type. Every hook is removed on exit, leaving the
model exactly as it was (the tests compare logits before and after).

Where the variant needs the tokens (2D-RoPE), they are read from the input ids of the same forward.

``massive_intervention(model, channels, values, layers)`` is Jin et al.'s (ICML 2025) "destruction" of massive
values: chosen post-RoPE channels of q and k replaced by a mean in chosen layers, the model restored exactly on exit.

``head_intervention(model, heads, kind)`` changes single attention heads (zero, mean, streaming A-shape, one RoPE band
or every plane unrotated), GQA-correct, the model restored exactly on exit; defined in ``interp.hooks.heads`` and
importable from here with ``head_means`` and ``HEAD_KINDS``.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from typing import Iterable, Iterator

import torch

from interp.errors import UnsupportedModelError
from interp.hooks.edit import Edit, edit
from interp.models import LoadedModel
from interp.models.arch import family, rope_specs
from interp.rope import RopeSpec, RopeVariant, plane_channels
from interp.hooks.heads import HEAD_KINDS, head_intervention, head_means  # noqa: F401  (the head interventions)


def variant_tables(spec: RopeSpec, variant: RopeVariant, positions: torch.Tensor, tokens: torch.Tensor | None = None,
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(cos, sin)``, each ``[pos, rotary_dim]``, as HF attention layers consume them, for one layer and variant.

    Plane l's angle goes to both of its channels (``interp.rope.plane_channels`` of the spec's pairing);
    values include ``spec.scaling`` and ``sqrt(variant.logit_scale(len(positions)))``. With partial rotary
    only the rotating channels have table entries (the model passes the rest through).
    """
    r = spec.rotary_dim
    ang = variant.angles(spec, positions, tokens).float()[:, : r // 2]  # [pos, freq] of the rotating planes
    ch = plane_channels(spec.d_head, spec.pairing)[: r // 2].to(ang.device)
    amp = spec.scaling * math.sqrt(variant.logit_scale(int(positions.numel())))
    cos = ang.new_empty(ang.shape[0], r)
    sin = ang.new_empty(ang.shape[0], r)
    for c in (0, 1):
        cos[:, ch[:, c]] = ang.cos() * amp
        sin[:, ch[:, c]] = ang.sin() * amp
    return cos, sin


@contextmanager
def rope_intervention(model: LoadedModel, variant: RopeVariant, layers: Iterable[int] | None = None) -> Iterator[None]:
    """Run ``model`` with ``variant``'s rotation in ``layers`` (default: all) inside the ``with`` block.

    Works for every forward of the HF model (``model.hf``), including ``interp.scan`` (the scan then
    measures the intervened model). Batch size must be 1 for token-aware variants.

    Raises:
        ValueError: a layer index outside ``0..n_layers-1``.
        UnsupportedModelError: a family whose attention does not receive its RoPE tables (GPT-J builds its own).
    """
    hf = model.hf
    if family(hf).call != "interface":
        raise UnsupportedModelError(f"{model.card.name}: causal RoPE interventions replace the cos/sin tables that attention "
                                    f"receives, and {model.card.family} builds its own; use the scan's counterfactual variants")
    specs = rope_specs(hf)
    chosen = sorted(set(range(len(specs)) if layers is None else layers))
    if any(not 0 <= l < len(specs) for l in chosen):
        raise ValueError(f"layers must lie in 0..{len(specs) - 1}, got {chosen}")
    with edit(model, *(Edit(("rope", l), "fn", variant_rope(specs[l], variant)) for l in chosen)):
        yield


def variant_rope(spec: RopeSpec, variant: RopeVariant):
    """A ``rope`` site ``fn`` (``interp.hooks.edit``): the layer's ``(cos, sin)`` replaced by ``variant_tables`` at
    the forward's positions (its ``position_ids``, else ``0..pos-1``) and, for token-aware variants, its input ids
    (batch 1)."""
    def fn(cos, sin, ctx):
        pos = ctx.position_ids
        pos = pos[0] if pos is not None else torch.arange(cos.shape[-2], device=cos.device)
        ids = ctx.tokens
        toks = ids[0] if ids is not None and ids.dim() == 2 and ids.shape[0] == 1 else None  # token-aware variants read it
        c, s = variant_tables(spec, variant, pos.to(cos.device), toks)
        return c.to(cos.dtype).expand_as(cos), s.to(sin.dtype).expand_as(sin)
    return fn


def mean_nll(model: LoadedModel, prompts) -> float:
    """Mean next-token negative log-likelihood (nats per predicted token) of the model on ``prompts``.

    Args:
        prompts: ``[prompt, pos]`` tensor or a list of ``[pos]`` token tensors.
    """
    total, count = 0.0, 0
    with torch.inference_mode():
        for t in prompts:
            t = torch.as_tensor(t, dtype=torch.long).to(model.device)
            logits = model.hf(t[None], use_cache=False).logits[0, :-1].float()
            total += float(torch.nn.functional.cross_entropy(logits, t[1:], reduction="sum"))
            count += t.numel() - 1
    return total / max(count, 1)


@contextmanager
def massive_intervention(model: LoadedModel, channels: dict, values: dict | None = None,
                         layers: Iterable[int] | None = None) -> Iterator[None]:
    """Jin et al.'s "destruction" of massive values: inside the ``with`` block, the chosen post-RoPE channels of q and k
    are replaced, at every position, by a mean.

    Jin et al. (ICML 2025; ``MingyuJ666/Rope_with_LLM``, ``modeling_llama.py`` / ``modeling_qwen2.py``,
    ``add_mean_perturbation``): right after ``apply_rotary_pos_emb``, for every head, the chosen channels of
    ``query_states`` (and, per kv head, ``key_states``) are overwritten with one number, the mean over the positions
    and over those channels (``torch.mean(torch.stack([vector.mean() for vector in target_vectors]))``); forwards of
    one token (decoding) are left alone (``if q_len != 1``). That is ``values=None`` here. With ``values``, each
    chosen channel is set to a fixed value instead (e.g. its mean over a calibration scan,
    ``interp.measures.massive.channel_means``), which keeps the intervention causal: Jin et al.'s per-forward mean
    reads every position of the forward, later ones included (one number per head, so little leaks).

    Implemented as ``q_rot`` / ``k_rot`` edits of the intervention layer (``interp.hooks.edit``): every attention
    implementation and ``interp.scan`` / ``interp.capture`` (whose taps see the edited q, k) run the intervened
    model; the model is exactly as before on exit.

    Args:
        model: a loaded model whose family passes its RoPE tables to attention (not GPT-J).
        channels: ``{"q": Bool[layer, head, d_head], "k": Bool[layer, kv_head, d_head]}`` (either may be missing:
            that side is left alone), e.g. ``interp.experiments.massive.massive_channels``.
        values: ``None`` (Jin et al.'s per-forward, per-head mean) or ``{"q": [layer, head, d_head], "k": [layer,
            kv_head, d_head]}`` float values written into the chosen channels.
        layers: the layers edited (default: all); the others keep their q, k.

    Raises:
        ValueError: a layer outside ``0..n_layers-1``, or masks / values of the wrong shape.
        UnsupportedModelError: a family that builds its own rotation (GPT-J).
    """
    hf, card = model.hf, model.card
    if family(hf).call != "interface":
        raise UnsupportedModelError(f"{card.name}: the massive-value intervention edits q, k after apply_rotary_pos_emb, "
                                    f"and {card.family} builds its own rotation")
    L = card.n_layers
    chosen = sorted(set(range(L) if layers is None else layers))
    if any(not 0 <= l < L for l in chosen):
        raise ValueError(f"layers must lie in 0..{L - 1}, got {chosen}")
    want = {"q": (L, card.n_heads, card.d_head), "k": (L, card.n_kv_heads, card.d_head)}
    masks, fills = {}, {}
    for x, shape in want.items():
        if channels.get(x) is None:
            continue
        m = torch.as_tensor(channels[x]).bool()
        if tuple(m.shape) != shape:
            raise ValueError(f"channels[{x!r}] must have shape {shape} ([layer, {'head' if x == 'q' else 'kv_head'}, d_head]), got {tuple(m.shape)}")
        masks[x] = m
        if values is not None:
            v = torch.as_tensor(values[x], dtype=torch.float32)
            if tuple(v.shape) != shape:
                raise ValueError(f"values[{x!r}] must have shape {shape}, got {tuple(v.shape)}")
            fills[x] = v

    def edit_fn(x: str, layer: int):
        def fn(t, _ctx):
            """``t`` ``[batch, pos, head, d_head]`` with the chosen channels of ``layer`` overwritten."""
            t = t.transpose(1, 2)  # [batch, head, pos, d]: the layout (and reduction order) of Jin et al.'s code
            m = masks[x][layer].to(t.device)  # [head, d]
            sel = m[None, :, None, :]
            if x in fills:
                fill = fills[x][layer].to(t.device, t.dtype)[None, :, None, :]
            else:
                if t.shape[2] == 1:  # Jin et al. leave one-token forwards alone
                    return t.transpose(1, 2)
                n = m.sum(-1).to(t.dtype) * (t.shape[0] * t.shape[2])  # entries per head
                fill = ((t * sel).sum((0, 2, 3)) / n.clamp(min=1))[None, :, None, None]
            return torch.where(sel, fill, t).transpose(1, 2)
        return fn

    edits = [Edit((f"{x}_rot", l), "fn", edit_fn(x, l)) for l in chosen for x in ("q", "k")
             if x in masks and bool(masks[x][l].any())]
    with edit(model, *edits):
        yield
