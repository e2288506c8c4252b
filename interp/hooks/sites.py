"""The named sites of a loaded model: where the intervention layer (``interp.hooks.edit``) reads and writes.

A site is a name and, except for ``logits``, a layer: ``head_out[3]`` is the per-head output of layer 3. Every
family interp loads (``interp.models.arch``: Llama, Qwen2, Gemma-3 with its sliding layers, the arch-matrix
families, the lab's decoder) exposes the same names, found once per model by ``site_map``. Tensors are shown to
edits in the layouts of the table (TransformerLens' ``[batch, pos, head, d_head]``, whatever the model's own):

=============  ==========================================  =========================================================
site           shape                                       what it is (where it is read)
=============  ==========================================  =========================================================
``resid_pre``  ``[batch, pos, d_model]``                   the residual stream entering decoder layer ``l``
``rope``       ``(cos, sin)``, each ``[batch, pos, rot]``  the RoPE tables layer ``l``'s attention receives
``q_pre``      ``[batch, pos, head, d_head]``              queries before RoPE (after bias and QK-norm)
``k_pre``      ``[batch, pos, kv_head, d_head]``           keys before RoPE
``q_rot``      ``[batch, pos, head, d_head]``              queries after RoPE, as attention receives them
``k_rot``      ``[batch, pos, kv_head, d_head]``           keys after RoPE
``v``          ``[batch, pos, kv_head, d_head]``           values
``scores``     ``[batch, head, q_pos, k_pos]``             attention logits: scaled, soft-capped, masked (-inf)
``pattern``    ``[batch, head, q_pos, k_pos]``             attention probabilities (softmax of ``scores``)
``head_out``   ``[batch, pos, head, d_head]``              each head's output: its slice of the output projection's
                                                           input (``o_proj``; GPT-NeoX ``dense``; GPT-J ``out_proj``)
``attn_out``   ``[batch, pos, d_model]``                   the attention block's output (after the projection)
``mlp_out``    ``[batch, pos, d_model]``                   the MLP block's output
``resid_post`` ``[batch, pos, d_model]``                   the residual stream leaving decoder layer ``l``
``logits``     ``[batch, pos, vocab]``                     the LM head's output (no layer)
=============  ==========================================  =========================================================

With GQA, ``k_*`` and ``v`` have ``kv_head`` on their head axis (query head ``h`` reads kv head
``h // (n_heads // n_kv_heads)``); an edit can instead name query heads (``Edit(..., per_query_head=True)``) and then
changes the key or value only as those heads read it. ``q_pre`` / ``k_pre`` are read by undoing the model's own RoPE
tables on what attention receives (``interp.rope.unrotate_tables``), exact up to float rounding for every family,
fused projections and QK-norms included; an edit there is rotated back with the same tables.

Imports ``interp.models.arch`` and ``interp.errors`` only.
"""

from __future__ import annotations

import re
import weakref
from dataclasses import dataclass

import torch

from interp.errors import ConfigError, UnsupportedModelError
from interp.models.arch import attention_modules, decoder_layers, family, head_dim

# name -> (shape, meaning); the table above, as data (docs and error messages read it)
SITES: dict[str, tuple[str, str]] = {
    "resid_pre": ("[batch, pos, d_model]", "residual stream entering the layer"),
    "rope": ("(cos, sin) [batch, pos, rot]", "RoPE tables the layer's attention receives"),
    "q_pre": ("[batch, pos, head, d_head]", "queries before RoPE"),
    "k_pre": ("[batch, pos, kv_head, d_head]", "keys before RoPE"),
    "q_rot": ("[batch, pos, head, d_head]", "queries after RoPE"),
    "k_rot": ("[batch, pos, kv_head, d_head]", "keys after RoPE"),
    "v": ("[batch, pos, kv_head, d_head]", "values"),
    "scores": ("[batch, head, q_pos, k_pos]", "attention logits (scaled, soft-capped, masked)"),
    "pattern": ("[batch, head, q_pos, k_pos]", "attention probabilities"),
    "head_out": ("[batch, pos, head, d_head]", "each head's output (output projection input)"),
    "attn_out": ("[batch, pos, d_model]", "attention block output"),
    "mlp_out": ("[batch, pos, d_model]", "MLP block output"),
    "resid_post": ("[batch, pos, d_model]", "residual stream leaving the layer"),
    "logits": ("[batch, pos, vocab]", "LM head output"),
}
ATTENTION_SITES = ("q_pre", "k_pre", "q_rot", "k_rot", "v", "scores", "pattern")  # inside the attention call
HEAD_AXIS = {"q_pre": 2, "k_pre": 2, "q_rot": 2, "k_rot": 2, "v": 2, "head_out": 2, "scores": 1, "pattern": 1}
KV_SITES = ("k_pre", "k_rot", "v")  # head axis = kv_head
OUTPUT_PROJECTIONS = ("o_proj", "dense", "out_proj")  # Llama-style, GPT-NeoX, GPT-J
MLP_ATTRS = ("mlp", "feed_forward", "ffn")


@dataclass(frozen=True)
class Site:
    """One named site: ``name`` from ``SITES`` and its ``layer`` (None only for ``logits``)."""

    name: str
    layer: int | None = None

    def __str__(self) -> str:
        return self.name if self.layer is None else f"{self.name}[{self.layer}]"


def parse_site(spec: "str | Site | tuple", n_layers: int | None = None) -> Site:
    """``"head_out[3]"``, ``"head_out.3"``, ``("head_out", 3)`` or a ``Site`` -> a checked ``Site``.

    Raises:
        ConfigError: an unknown name (the message lists ``SITES``), a missing or extra layer, a layer outside
            ``0..n_layers-1``.
    """
    if isinstance(spec, Site):
        name, layer = spec.name, spec.layer
    elif isinstance(spec, tuple):
        name, layer = spec[0], (spec[1] if len(spec) > 1 else None)
    else:
        m = re.fullmatch(r"\s*([a-z_]+)\s*(?:\[\s*(\d+)\s*\]|\.(\d+))?\s*", str(spec))
        if m is None:
            raise ConfigError(f"site {spec!r} is not NAME[LAYER] (e.g. head_out[3]) or 'logits'")
        name, layer = m.group(1), m.group(2) or m.group(3)
    if name not in SITES:
        raise ConfigError(f"unknown site {name!r}; use one of {', '.join(SITES)}")
    if name == "logits":
        if layer is not None:
            raise ConfigError("site 'logits' has no layer; write 'logits'")
        return Site(name)
    if layer is None:
        raise ConfigError(f"site {name!r} needs a layer, e.g. {name}[0]")
    layer = int(layer)
    if n_layers is not None and not 0 <= layer < n_layers:
        raise ConfigError(f"site {name}[{layer}]: layer outside 0..{n_layers - 1}")
    return Site(name, layer)


@dataclass(frozen=True)
class SiteMap:
    """Where each site of one HF model lives: its modules, found once (``site_map``).

    Attributes:
        model: the HF causal LM. layers: its decoder layers. attention: each layer's attention module.
        out_proj: each layer's attention output projection (its input holds the heads side by side).
        mlp: each layer's MLP module (None where a family has none to hook). embed: the input embedding.
        n_layers, n_heads, n_kv_heads, d_head: the grid. head_width: channels per head at the output
            projection's input (``d_head``; wider calls, e.g. the lab's ALiBi plane, are cut before it).
        interface: attention goes through transformers' ``AttentionInterface`` (every family but GPT-J).
        pairing: the family's RoPE pairing.
    """

    model: torch.nn.Module
    layers: tuple[torch.nn.Module, ...]
    attention: tuple[torch.nn.Module, ...]
    out_proj: tuple[torch.nn.Module, ...]
    mlp: tuple[torch.nn.Module | None, ...]
    embed: torch.nn.Module
    n_layers: int
    n_heads: int
    n_kv_heads: int
    d_head: int
    head_width: int
    interface: bool
    pairing: str

    def kv_head(self, head: int) -> int:
        """The kv head query head ``head`` reads (``head // (n_heads // n_kv_heads)``)."""
        return head // (self.n_heads // self.n_kv_heads)

    def n_axis(self, name: str) -> int:
        """Entries on the head axis of site ``name`` (``n_kv_heads`` for ``k_*`` / ``v``, else ``n_heads``)."""
        return self.n_kv_heads if name in KV_SITES else self.n_heads


_MAPS: "weakref.WeakKeyDictionary[torch.nn.Module, SiteMap]" = weakref.WeakKeyDictionary()


def _find(parent: torch.nn.Module, names: tuple[str, ...], kind: type = torch.nn.Module):
    return next((getattr(parent, a) for a in names if isinstance(getattr(parent, a, None), kind)), None)


def site_map(model) -> SiteMap:
    """The ``SiteMap`` of a ``LoadedModel`` or HF causal LM, built on first use and kept for the model's lifetime.

    Raises:
        UnsupportedModelError: no decoder layers or attention modules (``interp.models.arch``), or an attention
            module without an output projection (``o_proj`` / ``dense`` / ``out_proj``), or an output projection
            whose input is not ``n_heads`` equal slices.
    """
    hf = getattr(model, "hf", model)
    got = _MAPS.get(hf)
    if got is not None:
        return got
    layers = decoder_layers(hf)
    attn = attention_modules(hf)
    projs = []
    for i, a in enumerate(attn):
        p = _find(a, OUTPUT_PROJECTIONS, torch.nn.Linear)
        if p is None:
            raise UnsupportedModelError(f"layer {i}: attention module {type(a).__name__} has no output projection "
                                        f"(looked for {OUTPUT_PROJECTIONS}); head sites need one")
        projs.append(p)
    cfg = hf.config
    H = int(cfg.num_attention_heads)
    K = int(getattr(cfg, "num_key_value_heads", None) or H)
    if projs[0].in_features % H:
        raise UnsupportedModelError(f"{type(hf).__name__}: the output projection reads {projs[0].in_features} channels, "
                                    f"not {H} equal head slices")
    fam = family(hf)
    sm = SiteMap(hf, tuple(layers), tuple(attn), tuple(projs), tuple(_find(l, MLP_ATTRS) for l in layers),
                 hf.get_input_embeddings(), len(layers), H, K, head_dim(hf), projs[0].in_features // H,
                 fam.call == "interface", fam.pairing)
    _MAPS[hf] = sm
    return sm


def sites_table() -> str:
    """The site table as Markdown (name, shape, meaning), for the docs and ``interp patch --help``."""
    rows = ["| site | shape | what it is |", "|---|---|---|"]
    rows += [f"| `{n}` | `{s}` | {m} |" for n, (s, m) in SITES.items()]
    return "\n".join(rows)
