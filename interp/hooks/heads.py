"""Interventions on single attention heads: zero, mean, streaming (A-shape), one RoPE band unrotated, no RoPE.

``head_intervention(model, heads, kind, ...)`` changes, for the duration of a ``with`` block, what each chosen
query head ``(layer, head)`` contributes to its layer, and nothing else; the model is exactly as before on exit
(every hook removed, the attention implementation restored: logits bit-identical, a test). Kinds:

- ``zero``: the head's output, its slice ``[h * d_head, (h + 1) * d_head)`` of the input of the attention output
  projection (``o_proj``; GPT-NeoX ``dense``, GPT-J ``out_proj``), set to 0 at every position (Michel et al. 2019,
  "Are Sixteen Heads Really Better than One?"; Voita et al. 2019). A forward pre-hook on that projection.
- ``mean``: that slice replaced at every position by the head's mean output over every position of every prompt of
  a reference set (IOI-style mean ablation, Wang et al. 2022), ``head_means`` (one clean pass). Same pre-hook.
- ``streaming``: DuoAttention's A-shape (Xiao et al. 2024, "DuoAttention", Sec. 3; StreamingLLM's sink + window):
  the head's query ``i`` attends only to keys ``0..sink-1`` and to the last ``window`` keys ``i-window+1..i``
  (itself included), softmax renormalised over them; keys the model itself hides (causal, sliding window) stay
  hidden. DuoAttention uses 128 sink and 256 recent tokens on contexts of many thousand tokens; the defaults here
  (``sink=4, window=64``) fit the prompts of a few hundred tokens that this toolkit scans on a CPU, where 128 + 256
  keys would cover almost every query's whole context and the intervention would change nothing.
- ``rope_band``: the head's own rotation planes of one band (``interp.rope.band_planes``: high / medium / low
  third, ``n_remove`` evenly spaced planes of it, six as in paper 004 Table 5; ``n_remove=None``: the whole third)
  left unrotated (theta_l -> 0, channels kept, amplitude the layer's RoPE scaling) in the head's query and in its
  own copy of the key: the per-head version of ``rope_intervention`` / ``interp ablate --causal``, which does it
  for whole layers (on every head of a layer the two agree; a test).
- ``nope``: every rotating plane of the head unrotated (no positional rotation at all for that head).

GQA: a query head shares its key/value head with ``group_size - 1`` others. ``streaming``, ``rope_band`` and
``nope`` recompute the chosen head's attention from the layer's post-RoPE q, k, v (the head reads its kv head
``h // group_size``); for the RoPE kinds the key is unrotated for that head alone, so the heads that share the kv
head keep their keys and outputs bit-identical (a test). The recomputation goes through a registered attention
function (transformers' ``AttentionInterface``, name ``interp_heads``) that first runs the model's own attention
implementation for the whole layer and then overwrites the chosen heads' outputs; no model code is patched.

``rows`` lets one forward carry several single-head interventions at once, one per group of batch rows (how
``interp.experiments.effects`` batches the heads of a layer): ``rows[i]`` lists the batch rows in which
``heads[i]`` is changed.

GPT-J builds its own attention (no ``AttentionInterface``): ``zero`` and ``mean`` work, the others raise.
``interp.scan`` and ``capture(patterns=True)`` compute attention themselves (their tap does not call the model's
attention function), so a forward of theirs inside a ``streaming`` / ``rope_band`` / ``nope`` block raises instead of
silently measuring the unchanged heads; ``zero`` and ``mean`` (output projection hooks) stay active under them.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator, Sequence

import torch
from jaxtyping import Float
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface, sdpa_mask
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from interp.errors import ConfigError, UnsupportedModelError
from interp.models.arch import attention_modules, family, rope_specs
from interp.rope import BANDS, band_planes, plane_channels, unrotate_tables

HEAD_KINDS = ("zero", "mean", "streaming", "rope_band", "nope")
ATTN_NAME = "interp_heads"
OUTPUT_PROJECTIONS = ("o_proj", "dense", "out_proj")  # Llama-style, GPT-NeoX, GPT-J


def output_projections(hf_model: torch.nn.Module) -> list[torch.nn.Module]:
    """Per layer, the attention output projection: the module whose input is ``[batch, pos, head * d_head]``, the
    heads' outputs side by side (head ``h`` in channels ``h * d_head .. (h + 1) * d_head - 1``).

    Raises:
        UnsupportedModelError: an attention module without ``o_proj`` / ``dense`` / ``out_proj``.
    """
    out = []
    for i, attn in enumerate(attention_modules(hf_model)):
        m = next((getattr(attn, a) for a in OUTPUT_PROJECTIONS if isinstance(getattr(attn, a, None), torch.nn.Linear)), None)
        if m is None:
            raise UnsupportedModelError(f"layer {i}: attention module {type(attn).__name__} has no output projection "
                                        f"(looked for {OUTPUT_PROJECTIONS}); head interventions need one")
        out.append(m)
    return out


def _grid(model) -> tuple[int, int, int, int]:
    c = model.card
    return c.n_layers, c.n_heads, c.n_kv_heads, c.d_head


def output_width(model) -> int:
    """Channels per head at the output projection's input (``d_head``, unless the attention call is wider than what
    reaches the projection: the lab's ALiBi plane adds two channels that are dropped first).

    Raises:
        UnsupportedModelError: the projection's input is not ``n_heads`` equal slices.
    """
    H = model.card.n_heads
    n = output_projections(model.hf)[0].in_features
    if n % H:
        raise UnsupportedModelError(f"{model.card.name}: the output projection reads {n} channels, not {H} equal head slices")
    return n // H


def check_heads(heads: Sequence[tuple[int, int]], n_layers: int, n_heads: int) -> list[tuple[int, int]]:
    """``heads`` as a list of ``(layer, head)`` int pairs, checked against a ``n_layers x n_heads`` grid.

    Raises:
        ConfigError: no heads, or a pair outside ``0..n_layers-1`` x ``0..n_heads-1`` (the message names it).
    """
    out = [(int(l), int(h)) for l, h in heads]
    if not out:
        raise ConfigError("no heads given: name at least one (layer, head) pair, e.g. [(0, 1)] or --heads 0:1")
    for l, h in out:
        if not (0 <= l < n_layers and 0 <= h < n_heads):
            raise ConfigError(f"head {l}:{h} is outside the model's grid: layers 0..{n_layers - 1}, heads 0..{n_heads - 1}")
    return out


def check_kind(kind: str, *, sink: int = 4, window: int = 64, band: str = "high") -> None:
    """Check an intervention kind and its options.

    Raises:
        ConfigError: unknown kind (the message lists ``HEAD_KINDS``), ``sink < 0``, ``window < 1``, unknown band.
    """
    if kind not in HEAD_KINDS:
        raise ConfigError(f"unknown head intervention {kind!r}; use one of {', '.join(HEAD_KINDS)}")
    if kind == "streaming":
        if int(sink) < 0:
            raise ConfigError(f"sink must be >= 0 keys (streaming keeps keys 0..sink-1), got {sink}")
        if int(window) < 1:
            raise ConfigError(f"window must be >= 1 key (the query itself), got {window}")
    if kind == "rope_band" and band not in BANDS:
        raise ConfigError(f"unknown band {band!r}; use one of {', '.join(BANDS)}")


# --------------------------------------------------------------------------------------------
# mean outputs (one clean pass)
# --------------------------------------------------------------------------------------------


class HeadOutputSums:
    """Accumulates, while active (``with``), every head's output summed over batch rows and positions (float64).

    ``sums``: ``[layer, head, d_head]`` float64; ``count``: positions summed per layer (batch x pos). ``means()``
    returns ``[layer, head, d_head]`` float32. Used by ``head_means`` and by ``interp.experiments.effects``, which
    gathers the means in the same clean pass that caches the residual stream.
    """

    def __init__(self, model):
        L, H, _, _ = _grid(model)
        d = output_width(model)
        self.model, self.H, self.d = model, H, d
        self.sums = torch.zeros(L, H, d, dtype=torch.float64)
        self.count = torch.zeros(L, dtype=torch.float64)
        self._handles: list = []

    def __enter__(self) -> "HeadOutputSums":
        def hook(layer: int):
            def fn(_m, args, kwargs):
                x = args[0] if args else kwargs["input"]  # [batch, pos, head * d_head]
                self.sums[layer] += x.detach().double().sum((0, 1)).view(self.H, self.d).cpu()
                self.count[layer] += x.shape[0] * x.shape[1]
            return fn
        self._handles = [m.register_forward_pre_hook(hook(l), with_kwargs=True)
                         for l, m in enumerate(output_projections(self.model.hf))]
        return self

    def __exit__(self, *exc) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []

    def means(self) -> Float[torch.Tensor, "layer head d_head"]:
        """Mean output of every head (float32). Raises ConfigError when nothing was recorded."""
        if not bool((self.count > 0).all()):
            raise ConfigError("no forward ran while recording head outputs: give at least one prompt")
        return (self.sums / self.count[:, None, None]).float()


def head_means(model, prompts) -> Float[torch.Tensor, "layer head d_head"]:
    """Every head's mean output (its slice of the output projection's input) over every position of every prompt.

    The reference of ``kind="mean"`` (IOI-style mean ablation, Wang et al. 2022): one clean forward per prompt,
    sums in float64.

    Args:
        model: a ``LoadedModel``.
        prompts: ``[prompt, pos]`` token ids or a list of ``[pos]`` tensors.

    Raises:
        ConfigError: no prompts.
    """
    rec = HeadOutputSums(model)
    with torch.inference_mode(), rec:
        for t in prompts:
            t = torch.as_tensor(t, dtype=torch.long).to(model.device)
            model.hf(t[None], use_cache=False)
    return rec.means()


# --------------------------------------------------------------------------------------------
# the registered attention function
# --------------------------------------------------------------------------------------------


@dataclass
class _Edit:
    """One head's attention-level change in one layer, on some batch rows."""

    head: int
    kv_head: int
    rows: slice | torch.Tensor
    kind: str
    sink: int = 0
    window: int = 1
    channels: torch.Tensor | None = None  # [n] channels whose rotation is undone (rope_band, nope)
    scaling: float = 1.0  # the layer's RoPE amplitude: an unrotated plane keeps it
    pairing: str = "rotate_half"


_EDITS: dict[int, list[_Edit]] = {}  # id(attention module) -> its edits, while some head_intervention is active
_DELEGATE: dict[int, object] = {}  # id(attention module) -> the attention function the model ran before
_TABLES: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # id(attention module) -> its (cos, sin) of this forward
_PENDING: set[int] = set()  # attention modules entered whose edits have not run yet (cleared by _heads_attention)


def _visible(mask: torch.Tensor | None, n_q: int, n_k: int, window: int | None, device) -> torch.Tensor:
    """``[batch or 1, q_pos, k_pos]`` bool: which keys each query may see in the model itself (its mask, else causal;
    and the sliding window). The last query is the last key (no cache offset beyond ``n_k - n_q``)."""
    i = torch.arange(n_q, device=device)[:, None] + (n_k - n_q)
    j = torch.arange(n_k, device=device)[None, :]
    if mask is not None and mask.dim() == 4:
        m = mask[:, 0, :, :n_k]
        vis = m if m.dtype == torch.bool else m > torch.finfo(m.dtype).min / 2
    else:
        vis = (j <= i)[None]
    if window is not None:
        vis = vis & ((i - j) < int(window))[None]
    return vis


def _unrotated(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, e: _Edit) -> torch.Tensor:
    """``x`` ``[rows, pos, d_head]`` post-RoPE with ``e.channels`` unrotated (theta -> 0, amplitude ``e.scaling``), float32."""
    pre = unrotate_tables(x.transpose(0, 1), cos, sin, e.pairing).transpose(0, 1)  # [rows, pos, d] float32
    out = x.float().clone()
    ch = e.channels.to(x.device)
    out[..., ch] = pre[..., ch] * e.scaling
    return out


def _heads_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, sliding_window=None,
                     softcap=None, **kw):
    """Registered as ``interp_heads``: the model's own attention for the layer, then the chosen heads recomputed.

    ``query`` ``[batch, head, q_pos, d_head]``, ``key`` / ``value`` ``[batch, kv_head, k_pos, d_head]`` (post-RoPE);
    returns ``(out [batch, q_pos, head, d_head], weights [batch, head, q_pos, k_pos] | None)`` like every attention
    function of transformers.
    """
    delegate = _DELEGATE.get(id(module), sdpa_attention_forward)
    out, w = delegate(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout,
                      sliding_window=sliding_window, softcap=softcap, **kw)
    edits = _EDITS.get(id(module))
    _PENDING.discard(id(module))
    if not edits:
        return out, w
    scale = float(scaling if scaling is not None else module.scaling)
    n_q, n_k = query.shape[2], key.shape[2]
    vis_all = _visible(attention_mask, n_q, n_k, sliding_window, query.device)
    out = out.clone()
    tables = _TABLES.get(id(module))
    for e in edits:
        rows = e.rows
        if isinstance(rows, torch.Tensor) and rows.numel() and int(rows.max()) >= query.shape[0]:
            raise ConfigError(f"rows {rows.tolist()} of head {e.head} exceed the batch of {query.shape[0]}")
        q, k, v = query[rows, e.head], key[rows, e.kv_head], value[rows, e.kv_head]  # [r, pos, d]
        vis = vis_all[rows] if vis_all.shape[0] > 1 else vis_all
        if e.kind == "streaming":
            i = torch.arange(n_q, device=q.device)[:, None] + (n_k - n_q)
            j = torch.arange(n_k, device=q.device)[None, :]
            vis = vis & ((j < e.sink) | ((i - j) < e.window))[None]
            q, k = q.float(), k.float()
        else:
            cos, sin = tables
            if cos.shape[0] > 1 and not bool((cos == cos[:1]).all()):
                raise ConfigError("rope_band / nope head interventions need the same positions in every batch row")
            q, k = _unrotated(q, cos[0][-n_q:], sin[0][-n_q:], e), _unrotated(k, cos[0], sin[0], e)
        logits = torch.matmul(q, k.transpose(-1, -2)) * scale
        if softcap is not None:
            logits = softcap * torch.tanh(logits / softcap)
        p = torch.softmax(logits.masked_fill(~vis, float("-inf")), dim=-1)
        out[rows, :, e.head] = torch.matmul(p, v.float()).to(out.dtype)
        if w is not None:
            w[rows, e.head] = p.to(w.dtype)
    return out, w


AttentionInterface.register(ATTN_NAME, _heads_attention)
AttentionMaskInterface.register(ATTN_NAME, sdpa_mask)


def _delegate_for(attn: torch.nn.Module, impl: str):
    """The attention function the model runs under ``impl`` (its modeling file's eager one, or a registered one)."""
    if impl == "eager":
        return getattr(sys.modules[type(attn).__module__], "eager_attention_forward")
    return ALL_ATTENTION_FUNCTIONS[impl]


# --------------------------------------------------------------------------------------------
# the context manager
# --------------------------------------------------------------------------------------------


def _as_rows(r) -> slice | torch.Tensor:
    if r is None:
        return slice(None)
    if isinstance(r, slice):
        return r
    t = torch.as_tensor(list(r) if not isinstance(r, torch.Tensor) else r, dtype=torch.long).flatten()
    if t.numel() and int(t.min()) < 0:
        raise ConfigError(f"rows must be batch indices >= 0, got {t.tolist()}")
    return t


@contextmanager
def head_intervention(model, heads: Sequence[tuple[int, int]], kind: str, *, sink: int = 4, window: int = 64,
                      band: str = "high", n_remove: int | None = 6,
                      means: Float[torch.Tensor, "layer head d_head"] | None = None, prompts=None,
                      rows: Sequence | None = None) -> Iterator[None]:
    """Run ``model`` with each of ``heads`` changed by ``kind`` inside the ``with`` block (module docstring).

    Args:
        model: a ``LoadedModel``.
        heads: ``(layer, head)`` pairs (query heads).
        kind: ``zero`` | ``mean`` | ``streaming`` | ``rope_band`` | ``nope``.
        sink, window: ``streaming``'s A-shape: keys ``0..sink-1`` and ``i-window+1..i`` (counts of keys).
        band, n_remove: ``rope_band``'s band (``high`` | ``medium`` | ``low``) and how many of its planes
            (``interp.rope.band_planes``; None: all of the band).
        means: ``kind="mean"``: ``[layer, head, d_head]`` reference outputs (``head_means``); else ``prompts`` is
            used to compute them in one clean pass (before the intervention starts).
        rows: optional, one entry per head: the batch rows (indices or a slice) in which that head is changed;
            default every row.

    Works for any forward of ``model.hf`` inside the block (batch of any size, no KV cache across calls needed).
    Interventions nest (the innermost edits add to the outer ones).

    Raises:
        ConfigError: unknown kind or band, no heads, a head outside the grid, ``sink < 0``, ``window < 1``,
            ``rope_band`` on a layer with fewer than 3 rotating planes,
            ``mean`` without ``means`` or ``prompts`` or with ``means`` of the wrong shape, ``rows`` not one entry
            per head, or rows beyond the batch (at the forward).
        UnsupportedModelError: ``streaming`` / ``rope_band`` / ``nope`` on GPT-J (no attention interface).
    """
    check_kind(kind, sink=sink, window=window, band=band)
    L, H, K, _ = _grid(model)
    heads = check_heads(heads, L, H)
    if rows is not None and len(rows) != len(heads):
        raise ConfigError(f"rows needs one entry per head: {len(heads)} heads, {len(rows)} row sets")
    row_sets = [_as_rows(None if rows is None else r) for r in (rows if rows is not None else [None] * len(heads))]
    hf = model.hf
    handles: list = []
    if kind in ("zero", "mean"):
        d = output_width(model)
        if kind == "mean":
            if means is None:
                if prompts is None:
                    raise ConfigError("kind='mean' needs the reference means: pass means=head_means(model, prompts) or prompts=...")
                means = head_means(model, prompts)
            means = torch.as_tensor(means)
            if tuple(means.shape) != (L, H, d):
                raise ConfigError(f"means must have shape [layer, head, d_head] = {(L, H, d)}, got {tuple(means.shape)}")
            means = means.float()
        by_layer: dict[int, list[tuple[int, slice | torch.Tensor]]] = {}
        for (l, h), r in zip(heads, row_sets):
            by_layer.setdefault(l, []).append((h, r))
        projs = output_projections(hf)

        def replace(layer: int):
            def hook(_m, args, kwargs):
                x = args[0] if args else kwargs["input"]
                x = x.clone()
                for h, r in by_layer[layer]:
                    if isinstance(r, torch.Tensor) and r.numel() and int(r.max()) >= x.shape[0]:
                        raise ConfigError(f"rows {r.tolist()} of head {layer}:{h} exceed the batch of {x.shape[0]}")
                    sl = x[r, :, h * d:(h + 1) * d]
                    x[r, :, h * d:(h + 1) * d] = 0.0 if kind == "zero" else means[layer, h].to(x.device, x.dtype).expand_as(sl)
                if args:
                    return (x,) + tuple(args[1:]), kwargs
                return args, {**kwargs, "input": x}
            return hook

        handles = [projs[l].register_forward_pre_hook(replace(l), with_kwargs=True) for l in sorted(by_layer)]
        try:
            yield
        finally:
            for hd in handles:
                hd.remove()
        return

    fam = family(hf)
    if fam.call != "interface":
        raise UnsupportedModelError(f"{model.card.name}: {kind!r} head interventions recompute attention through transformers' "
                                    f"AttentionInterface, and {model.card.family} builds its own; zero and mean work")
    mods = attention_modules(hf)
    specs = rope_specs(hf)
    group = H // K
    edits: dict[int, list[_Edit]] = {}
    for (l, h), r in zip(heads, row_sets):
        e = _Edit(h, h // group, r, kind, int(sink), int(window))
        if kind in ("rope_band", "nope"):
            spec = specs[l]
            n_rot = spec.rotary_dim // 2
            if kind == "rope_band" and n_rot < 3:
                raise ConfigError(f"layer {l} rotates only {n_rot} planes: rope_band needs at least 3 to form high / medium / "
                                  f"low bands; use kind='nope'")
            planes = band_planes(n_rot, band, n_remove or n_rot) if kind == "rope_band" else torch.arange(n_rot)
            e.channels = plane_channels(spec.d_head, spec.pairing)[planes].flatten()
            e.scaling, e.pairing = float(spec.scaling), spec.pairing
        edits.setdefault(id(mods[l]), []).append(e)
    previous = hf.config._attn_implementation or "sdpa"
    outermost = previous != ATTN_NAME
    need_tables = kind in ("rope_band", "nope")

    def enter(module, args, kwargs):
        _PENDING.add(id(module))
        if need_tables:
            cos, sin = kwargs["position_embeddings"]
            _TABLES[id(module)] = (cos, sin)

    def check_ran(module, args, kwargs, out):
        if id(module) in _PENDING:
            _PENDING.discard(id(module))
            raise ConfigError(f"the {kind!r} head intervention did not run: this forward routed attention around transformers' "
                              f"attention interface (interp.scan's engine or capture(patterns=True) compute attention "
                              f"themselves); run the model directly inside the block, or use zero / mean")

    try:
        if outermost:
            for m in mods:
                _DELEGATE[id(m)] = _delegate_for(m, previous)
            AttentionMaskInterface.register(ATTN_NAME, ALL_MASK_ATTENTION_FUNCTIONS[previous]
                                            if previous in ALL_MASK_ATTENTION_FUNCTIONS else sdpa_mask)
            hf.set_attn_implementation(ATTN_NAME)
        for mid, es in edits.items():
            _EDITS.setdefault(mid, []).extend(es)
        for l in sorted({l for l, _ in heads}):
            handles.append(mods[l].register_forward_pre_hook(enter, with_kwargs=True))
            handles.append(mods[l].register_forward_hook(check_ran, with_kwargs=True))
        yield
    finally:
        for hd in handles:
            hd.remove()
        for mid, es in edits.items():
            kept = [x for x in _EDITS.get(mid, []) if not any(x is y for y in es)]
            if kept:
                _EDITS[mid] = kept
            else:
                _EDITS.pop(mid, None)
        if outermost:
            hf.set_attn_implementation(previous)
            for m in mods:
                _DELEGATE.pop(id(m), None)
                _TABLES.pop(id(m), None)
                _PENDING.discard(id(m))
