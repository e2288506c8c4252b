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
head keep their keys and outputs bit-identical (a test).

Every kind is a list of edits of the intervention layer (``head_edits``; ``interp.hooks.edit``): ``zero`` / ``mean``
edit ``head_out``, ``streaming`` masks ``scores`` outside the A-shape, ``rope_band`` / ``nope`` edit ``q_rot`` and,
per query head, ``k_rot``. No model code is patched and no hook is registered here.

``rows`` lets one forward carry several single-head interventions at once, one per group of batch rows (how
``interp.experiments.effects`` batches the heads of a layer): ``rows[i]`` lists the batch rows in which
``heads[i]`` is changed.

GPT-J builds its own attention (no ``AttentionInterface``): ``zero`` and ``mean`` work, the others raise.
``interp.scan`` and ``capture(patterns=True)`` compute attention themselves (their tap does not call the model's
attention function), so a forward of theirs inside a ``streaming`` / ``rope_band`` / ``nope`` block raises instead of
silently measuring the unchanged heads; ``zero`` and ``mean`` (output projection hooks) stay active under them.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Sequence

import torch
from jaxtyping import Float

from interp.errors import ConfigError, UnsupportedModelError
from interp.hooks.edit import Edit, apply, edit, record
from interp.hooks.sites import OUTPUT_PROJECTIONS, site_map  # noqa: F401  (OUTPUT_PROJECTIONS: public name kept here)
from interp.models.arch import rope_specs
from interp.rope import BANDS, band_planes, plane_channels, unrotate_tables

HEAD_KINDS = ("zero", "mean", "streaming", "rope_band", "nope")


def output_projections(hf_model: torch.nn.Module) -> list[torch.nn.Module]:
    """Per layer, the attention output projection: the module whose input is ``[batch, pos, head * d_head]``, the
    heads' outputs side by side (head ``h`` in channels ``h * d_head .. (h + 1) * d_head - 1``); from the site map.

    Raises:
        UnsupportedModelError: an attention module without ``o_proj`` / ``dense`` / ``out_proj``.
    """
    return list(site_map(hf_model).out_proj)


def _grid(model) -> tuple[int, int, int, int]:
    c = model.card
    return c.n_layers, c.n_heads, c.n_kv_heads, c.d_head


def output_width(model) -> int:
    """Channels per head at the output projection's input (``d_head``, unless the attention call is wider than what
    reaches the projection: the lab's ALiBi plane adds two channels that are dropped first).

    Raises:
        UnsupportedModelError: the projection's input is not ``n_heads`` equal slices.
    """
    return site_map(model).head_width


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
    returns ``[layer, head, d_head]`` float32. A ``record`` edit of every layer's ``head_out``; used by
    ``head_means`` and by ``interp.experiments.effects``, which gathers the means in the same clean pass that caches
    the residual stream (``edits()`` gives the edits to install beside others).
    """

    def __init__(self, model):
        L, H, _, _ = _grid(model)
        d = output_width(model)
        self.model, self.H, self.d = model, H, d
        self.sums = torch.zeros(L, H, d, dtype=torch.float64)
        self.count = torch.zeros(L, dtype=torch.float64)
        self._block = None

    def edits(self) -> list[Edit]:
        """The ``record`` edits (one per layer's ``head_out``) that fill ``sums`` and ``count``."""
        def keep(layer: int):
            def fn(x, _ctx):  # x: [batch, pos, head, d_head]
                self.sums[layer] += x.detach().double().sum((0, 1)).cpu()
                self.count[layer] += x.shape[0] * x.shape[1]
            return fn
        return [record(("head_out", l), keep(l)) for l in range(self.sums.shape[0])]

    def __enter__(self) -> "HeadOutputSums":
        self._block = edit(self.model, *self.edits())
        self._block.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        block, self._block = self._block, None
        block.__exit__(*exc)

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
# the kinds as edits
# --------------------------------------------------------------------------------------------


def _as_rows(r) -> slice | list[int] | None:
    if r is None or isinstance(r, slice):
        return r
    t = torch.as_tensor(list(r) if not isinstance(r, torch.Tensor) else r, dtype=torch.long).flatten()
    if t.numel() and int(t.min()) < 0:
        raise ConfigError(f"rows must be batch indices >= 0, got {t.tolist()}")
    return t.tolist()


def streaming_mask(sink: int, window: int):
    """An ``fn`` for a ``scores`` edit: keys outside DuoAttention's A-shape (keys ``0..sink-1`` and the last
    ``window`` keys ``i-window+1..i``) set to ``-inf``, so the softmax renormalises over the rest.

    The function takes ``scores`` ``[rows, head, q_pos, k_pos]`` (the last query is the last key)."""
    def fn(x, _ctx):
        n_q, n_k = x.shape[-2], x.shape[-1]
        i = torch.arange(n_q, device=x.device)[:, None] + (n_k - n_q)
        j = torch.arange(n_k, device=x.device)[None, :]
        return x.masked_fill(~((j < sink) | ((i - j) < window)), float("-inf"))
    return fn


def unrotate_planes(channels: torch.Tensor, scaling: float, pairing: str):
    """An ``fn`` for a ``q_rot`` / ``k_rot`` edit: the given channels (rotation planes) unrotated (theta -> 0,
    amplitude the layer's RoPE ``scaling``), float32; the other channels as they were.

    The function takes ``[rows, pos, head, d_head]`` post-RoPE vectors and reads the layer's tables from ``ctx``.

    Raises (at the forward):
        ConfigError: batch rows with different positions (the tables must be the same in every row).
    """
    def fn(x, ctx):
        cos, sin = ctx.cos, ctx.sin
        if cos.shape[0] > 1 and not bool((cos == cos[:1]).all()):
            raise ConfigError("rope_band / nope head interventions need the same positions in every batch row")
        n = x.shape[1]
        c, s_ = cos[0][-n:], sin[0][-n:]
        pre = torch.stack([unrotate_tables(x[r], c, s_, pairing) for r in range(x.shape[0])])
        out = x.float().clone()
        ch = channels.to(x.device)
        out[..., ch] = pre[..., ch] * scaling
        return out
    return fn


def head_edits(model, heads: Sequence[tuple[int, int]], kind: str, *, sink: int = 4, window: int = 64,
               band: str = "high", n_remove: int | None = 6,
               means: Float[torch.Tensor, "layer head d_head"] | None = None, prompts=None,
               rows: Sequence | None = None) -> list[Edit]:
    """The edits (``interp.hooks.edit``) of ``head_intervention``; arguments and errors as there."""
    check_kind(kind, sink=sink, window=window, band=band)
    L, H, K, _ = _grid(model)
    heads = check_heads(heads, L, H)
    if rows is not None and len(rows) != len(heads):
        raise ConfigError(f"rows needs one entry per head: {len(heads)} heads, {len(rows)} row sets")
    row_sets = [_as_rows(None if rows is None else r) for r in (rows if rows is not None else [None] * len(heads))]
    if kind == "zero":
        return [Edit(("head_out", l), "zero", heads=[h], rows=r) for (l, h), r in zip(heads, row_sets)]
    if kind == "mean":
        d = output_width(model)
        if means is None:
            if prompts is None:
                raise ConfigError("kind='mean' needs the reference means: pass means=head_means(model, prompts) or prompts=...")
            means = head_means(model, prompts)
        means = torch.as_tensor(means)
        if tuple(means.shape) != (L, H, d):
            raise ConfigError(f"means must have shape [layer, head, d_head] = {(L, H, d)}, got {tuple(means.shape)}")
        means = means.float()
        return [Edit(("head_out", l), "mean", means[l, h], heads=[h], rows=r) for (l, h), r in zip(heads, row_sets)]
    if not site_map(model).interface:
        raise UnsupportedModelError(f"{model.card.name}: {kind!r} head interventions recompute attention through transformers' "
                                    f"AttentionInterface, and {model.card.family} builds its own; zero and mean work")
    if kind == "streaming":
        fn = streaming_mask(int(sink), int(window))
        return [apply(("scores", l), fn, heads=[h], rows=r) for (l, h), r in zip(heads, row_sets)]
    specs = rope_specs(model.hf)
    out = []
    for (l, h), r in zip(heads, row_sets):
        spec = specs[l]
        n_rot = spec.rotary_dim // 2
        if kind == "rope_band" and n_rot < 3:
            raise ConfigError(f"layer {l} rotates only {n_rot} planes: rope_band needs at least 3 to form high / medium / "
                              f"low bands; use kind='nope'")
        planes = band_planes(n_rot, band, n_remove or n_rot) if kind == "rope_band" else torch.arange(n_rot)
        fn = unrotate_planes(plane_channels(spec.d_head, spec.pairing)[planes].flatten(), float(spec.scaling), spec.pairing)
        out += [apply(("q_rot", l), fn, heads=[h], rows=r), Edit(("k_rot", l), "fn", fn, heads=[h], rows=r, per_query_head=True)]
    return out


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
            per head, or rows beyond the batch (at the forward); ``streaming`` / ``rope_band`` / ``nope`` under a
            forward that computes attention itself (``interp.scan``, ``capture(patterns=True)``).
        UnsupportedModelError: ``streaming`` / ``rope_band`` / ``nope`` on GPT-J (no attention interface).
    """
    edits = head_edits(model, heads, kind, sink=sink, window=window, band=band, n_remove=n_remove, means=means,
                       prompts=prompts, rows=rows)
    with edit(model, *edits):
        yield
