"""Architecture adapters: where a Hugging Face RoPE decoder keeps its attention layers and RoPE.

Everything interp measures is read at the attention call itself (``interp.models.taps``): post-RoPE queries
and keys as the model passes them to its attention function, with the scale, sliding window and
soft-cap it passes. What differs between families is small and lives here:

- where the decoder layers and their attention modules are (``model.layers[i].self_attn``,
  ``gpt_neox.layers[i].attention``, ``transformer.h[i].attn``);
- the RoPE *pairing* (``rotate_half`` or ``interleaved``, ``interp.rope``) and the rotary width
  (partial rotary: GPT-NeoX, StableLM, Phi-3 with ``partial_rotary_factor``, GPT-J's ``rotary_dim``);
- where the cos/sin tables come from: the ``position_embeddings`` argument of the attention module
  (every family but GPT-J) or GPT-J's own ``embed_positions`` buffer;
- how attention is called: through transformers' ``AttentionInterface`` (every family but GPT-J) or
  GPT-J's ``_attn`` method.

Pre-RoPE queries and keys are derived the same exact way for every family: the model's own cos/sin
tables are applied in reverse to the post-RoPE vectors (``interp.rope.unrotate_tables``). This works
whether the projection is fused (Phi-3 ``qkv_proj``, GPT-NeoX ``query_key_value``), normalised after
the head split (Qwen3, Gemma) or before it (OLMo-2), and it follows dynamic RoPE scaling, which
changes the tables with the prompt length.

Imports ``interp.rope`` and ``interp.errors`` only.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import torch

from interp.errors import UnsupportedModelError
from interp.rope import RopeSpec, default_inv_freq, partial_pairing

ATTENTION_ATTRS = ("self_attn", "attention", "attn")


@dataclass(frozen=True)
class Family:
    """One covered architecture family.

    Attributes:
        name: display name (README table).
        model_types: HF ``config.model_type`` values of the family.
        pairing: RoPE channel pairing before any partial-rotary suffix (``interp.rope``).
        call: ``"interface"`` (attention through ``transformers.AttentionInterface``) or ``"gptj"``
            (GPT-J's ``_attn`` method, with its own cos/sin buffer).
        notes: what the tiny test model of the family exercises.
        tested: the family is in the tested matrix (False for an unlisted type adapted by ``family``).
    """

    name: str
    model_types: tuple[str, ...]
    pairing: str = "rotate_half"
    call: str = "interface"
    notes: str = ""
    tested: bool = True


BUILTIN_FAMILIES: tuple[Family, ...] = (
    Family("Llama", ("llama",), notes="GQA; default, llama3, linear and dynamic RoPE scaling"),
    Family("Mistral", ("mistral",), notes="sliding window on every layer"),
    Family("Qwen2", ("qwen2",), notes="q/k/v biases"),
    Family("Qwen3", ("qwen3",), notes="QK-norm per head"),
    Family("Gemma-2", ("gemma2",), notes="attention logit soft-capping, alternating sliding/global layers"),
    Family("Gemma-3", ("gemma3_text", "gemma3"), notes="QK-norm, sliding/global layers with two RoPE bases"),
    Family("Phi-3", ("phi3",), notes="fused qkv_proj; partial rotary (Phi-4-mini style)"),
    Family("GPT-NeoX", ("gpt_neox",), notes="fused query_key_value, partial rotary (rotary_pct 0.25), parallel residual"),
    Family("StableLM", ("stablelm",), notes="partial rotary (0.25), per-head QK layer norm"),
    Family("OLMo-2", ("olmo2",), notes="QK-norm on the whole projection before the head split"),
    Family("Cohere", ("cohere",), "interleaved", notes="interleaved pairing, per-head QK layer norm"),
    Family("GPT-J", ("gptj",), "interleaved", "gptj", notes="interleaved pairing, partial rotary (rotary_dim)"),
)
FAMILIES = BUILTIN_FAMILIES  # plus what register_family adds (plugins such as interp.lab)
_BY_TYPE = {t: f for f in FAMILIES for t in f.model_types}


def register_family(fam: Family) -> None:
    """Add a family (e.g. ``interp.lab``'s decoder) so that ``family`` and the loaders know its model types.

    Idempotent for the same family; its modeling module must call transformers' attention interface with
    ``position_embeddings=(cos, sin)`` like the listed families (``interp.models.taps``).

    Raises:
        ValueError: one of its model types already belongs to another family.
    """
    global FAMILIES
    for t in fam.model_types:
        if t in _BY_TYPE and _BY_TYPE[t] != fam:
            raise ValueError(f"model_type {t!r} already belongs to family {_BY_TYPE[t].name}")
    if fam not in FAMILIES:
        FAMILIES = FAMILIES + (fam,)
    _BY_TYPE.update({t: fam for t in fam.model_types})


def decoder_layers(hf_model: torch.nn.Module) -> list[torch.nn.Module]:
    """The decoder layers of a HF causal LM, in order (``base_model.layers`` or ``base_model.h``).

    Raises:
        UnsupportedModelError: no layer list is found.
    """
    base = getattr(hf_model, "base_model", hf_model)
    for attr in ("layers", "h"):
        layers = getattr(base, attr, None)
        if isinstance(layers, torch.nn.ModuleList):
            return list(layers)
    raise UnsupportedModelError(f"{type(hf_model).__name__}: no decoder layer list (base_model.layers or .h) found; "
                                f"interp supports decoder-only causal LMs ({covered()})")


def attention_modules(hf_model: torch.nn.Module) -> list[torch.nn.Module]:
    """The self-attention module of every decoder layer, in layer order.

    Raises:
        UnsupportedModelError: a layer has no ``self_attn`` / ``attention`` / ``attn`` module.
    """
    mods = []
    for i, layer in enumerate(decoder_layers(hf_model)):
        m = next((getattr(layer, a) for a in ATTENTION_ATTRS if isinstance(getattr(layer, a, None), torch.nn.Module)), None)
        if m is None:
            raise UnsupportedModelError(f"{type(hf_model).__name__}: layer {i} has no attention module (looked for {ATTENTION_ATTRS})")
        mods.append(m)
    return mods


def covered() -> str:
    """The covered families, comma-separated (for messages)."""
    return ", ".join(f.name for f in FAMILIES)


def probe_pairing(attn: torch.nn.Module) -> str | None:
    """The pairing of the ``rotate_half`` function in an attention module's modeling file, found by turning e_0.

    ``rotate_half(e_0)`` is ``e_{d/2}`` for rotate-half and ``e_1`` for interleaved code; None when the file
    has no ``rotate_half``.
    """
    fn = getattr(sys.modules.get(type(attn).__module__), "rotate_half", None)
    if fn is None:
        return None
    x = torch.zeros(1, 1, 1, 8)
    x[..., 0] = 1.0
    y = fn(x)[0, 0, 0]
    return "interleaved" if y[1] != 0 else "rotate_half" if y[4] != 0 else None


def family(hf_model: torch.nn.Module) -> Family:
    """The family of a loaded HF model; an unlisted RoPE decoder that calls the attention interface is adapted too.

    An unlisted model type is accepted when its base model has a ``rotary_emb`` module, its layers have
    attention modules and its modeling file's ``rotate_half`` reveals the pairing (``probe_pairing``);
    its card then says ``tested: False``.

    Raises:
        UnsupportedModelError: the model has no RoPE (e.g. GPT-2's learned positions), no attention modules,
            or a pairing interp cannot determine; the message names what is missing.
    """
    mtype = getattr(hf_model.config, "model_type", "?")
    if mtype in _BY_TYPE:
        return _BY_TYPE[mtype]
    mods = attention_modules(hf_model)
    base = getattr(hf_model, "base_model", hf_model)
    if getattr(base, "rotary_emb", None) is None:
        raise UnsupportedModelError(f"model_type {mtype!r} has no rotary embedding (base_model.rotary_emb): interp measures "
                                    f"RoPE attention; covered families: {covered()}")
    pairing = probe_pairing(mods[0])
    if pairing is None:
        raise UnsupportedModelError(f"model_type {mtype!r}: cannot tell its RoPE pairing (no rotate_half in "
                                    f"{type(mods[0]).__module__}); covered families: {covered()}")
    return Family(mtype, (mtype,), pairing, notes="not in the tested matrix", tested=False)


def layer_types(config) -> list[str]:
    """Per-layer attention type (``full_attention`` unless the config lists ``layer_types``)."""
    return list(getattr(config, "layer_types", None) or ["full_attention"] * config.num_hidden_layers)


def _gptj_inv_freq(attn: torch.nn.Module) -> torch.Tensor:
    """GPT-J's frequencies, as its ``create_sinusoidal_positions`` builds them (base 10000 over ``rotary_dim``)."""
    return default_inv_freq(1e4, attn.pos_embd_dim)


def rope_specs(hf_model: torch.nn.Module) -> list[RopeSpec]:
    """Per-layer RoPE read from the model's rotary module (the frequencies it really uses).

    Gemma-3 keeps one set per layer type (``sliding_attention_inv_freq``, ``full_attention_inv_freq``);
    other models keep one ``inv_freq``. With partial rotary, ``inv_freq`` is padded with zeros to
    ``d_head / 2`` planes and the pairing gets its ``:R`` suffix (``interp.rope``). Dynamic RoPE scaling
    changes ``inv_freq`` with the prompt length: the spec is the one the module holds now.

    Raises:
        UnsupportedModelError: see ``family``.
    """
    fam = family(hf_model)
    cfg = hf_model.config
    mods = attention_modules(hf_model)
    d_head = head_dim(hf_model)
    specs = []
    for t, attn in zip(layer_types(cfg), mods):
        if fam.call == "gptj":
            inv, scale = _gptj_inv_freq(attn), 1.0
        else:
            rot = hf_model.base_model.rotary_emb
            if hasattr(rot, f"{t}_inv_freq"):
                inv, scale = getattr(rot, f"{t}_inv_freq"), getattr(rot, f"{t}_attention_scaling")
            else:
                inv, scale = rot.inv_freq, rot.attention_scaling
        inv = inv.detach().float().cpu()
        r = 2 * inv.numel()
        full = torch.cat([inv, inv.new_zeros(d_head // 2 - inv.numel())])
        specs.append(RopeSpec(full, float(scale), partial_pairing(fam.pairing, r, d_head)))
    return specs


def head_dim(hf_model: torch.nn.Module) -> int:
    """Channels per attention head (``config.head_dim``, else ``hidden_size / num_attention_heads``)."""
    cfg = hf_model.config
    return int(getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads)


def rope_scaling(config) -> str:
    """The RoPE type and its factor as one string, e.g. ``"default"``, ``"llama3 (factor 8.0)"``; per layer type if they differ."""
    params = getattr(config, "rope_parameters", None) or {}
    per_type = {t: params[t] for t in set(layer_types(config)) if isinstance(params.get(t), dict)} or {"": params}
    kinds = {}
    for t, p in sorted(per_type.items()):
        kind = p.get("rope_type", "default")
        kinds[t] = kind + (f" (factor {p['factor']})" if p.get("factor") not in (None, 1.0) and kind != "default" else "")
    if len(set(kinds.values())) == 1:
        return next(iter(kinds.values()))
    return "; ".join(f"{t}: {k}" for t, k in kinds.items())


def gptj_tables(attn: torch.nn.Module, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(cos, sin)``, each ``[pos, rotary_dim]`` per channel (interleaved), from GPT-J's ``embed_positions`` buffer."""
    sincos = attn.embed_positions.to(position_ids.device)[position_ids]
    sin, cos = torch.split(sincos, sincos.shape[-1] // 2, dim=-1)
    return cos.repeat_interleave(2, -1), sin.repeat_interleave(2, -1)
