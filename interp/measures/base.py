"""The Measure protocol: one per-head measurement family as declarations next to its math.

A measure family declares, in one class:

- ``name`` and ``options`` (the ``ScanConfig`` fields it owns, ``Option``: name, default, help, checks);
- ``switch``: the boolean option that turns an optional measure on (``None``: always on);
- ``columns(cfg)``: its ``heads.csv`` columns (``Column``: name, one-line label with paper and equation,
  whether the report offers it as a layer x head heatmap);
- ``entries(dims, cfg)``: its state entries (``Entry``: name, full shape, which axis is the layer, whether
  the last axis is per-position), all additive float64 sums;
- ``products``: which products of the engine's tiled attention pass it reads (``PRODUCTS``); the engine
  computes their union once per layer, on the fused kernel or the Python block path;
- ``variant_products``: which products each counterfactual pass (product ``variants``) must carry for it besides
  ``lag`` and ``key0`` (some of ``VARIANT_PRODUCTS``); ``variant_needs(cfg)`` narrows them per config;
- ``update(x)``: one layer of one prompt (``LayerInput``) -> ``{entry: value}`` without the layer axis; the
  engine adds each value at the layer's index (and, for per-position entries, at positions ``0..pos-1``);
- ``update_prompt(x)``: once per prompt (``PromptInput``) -> values of the entries without a layer axis;
- ``compute(s)``: summed state (a ``Summed``: a ``ScanResult`` or anything with ``state``, ``card``,
  ``config``, ``meta``) -> ``{column: [layer, head] tensor}``.

States merge by addition (``interp.measures.state.State``), so prompts, shards and machines combine in
any order; per-position entries of prompts of different lengths are zero-padded. The model is
torchmetrics' ``Metric`` (declared states, ``update``, ``compute``, merge), without ``nn.Module``.

Axes (``interp`` module docstring): ``layer``, ``head``, ``kv_head``, ``d_head``, ``freq``, ``pos``, ``delta``.
Low-level module: imports only torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Mapping, Protocol, Sequence

import torch
from jaxtyping import Float

# Products of the engine's tiled attention pass that a measure may read (LayerInput.products):
PRODUCTS = {
    "lag": "[head, pos] float: sum over queries i of A[i, i - delta] at every lag delta, keys 0..skip-1 left out",
    "key0": "[head, pos] float: A[i, 0], the weight of every query on key 0",
    "map": "[head, M, M] float64: A[:M, :M], the first positions (M = map_size)",
    "key0_pre": "[head] float64: mean over queries of the weight on key 0 in the pre-RoPE counterfactual (softmax of "
                "q_pre . k_pre), over every query or a stratified sample of counterfactual_queries positions (interp.measures.sinks)",
    "inp": "dict signed / abs [head, freq], count [head]: sums of the per-plane InP over visible pairs with keys >= skip",
    "token_match": "[head, 3] float64: sum over queries of the attention on previous-token, duplicate-token and induction "
                   "keys (interp.attention.token_match_masks; TransformerLens head_detector patterns)",
    "variants": "list over ScanConfig.variants of dicts {lag, key0, and every product some measure names in its "
                "variant_products}: the same products with the variant's rotation of the pre-RoPE q/k (no P @ V)",
    "lse": "[head, pos] float32: row log-sum-exp lse_i of each query's scaled, soft-capped, masked logits, so that "
           "A[i, j] = exp(logit_ij - lse_i) (interp.attention.probs_at / row_probs recompute any entry from q_rot, k_rot)",
    "entropy": "[head, 2] float64: sum over queries of the row entropy -sum_j A[i, j] log A[i, j] (nats), and sum over "
               "queries of that divided by log(#visible keys of i) (rows with one visible key add 0)",
    "key_mass": "[head, pos] float64: column sums, sum over queries i of A[i, j] for every key j (all keys, no skip)",
}


# Products a counterfactual pass can carry besides lag and key0 (Measure.variant_products): the tiled pass computes
# them for any q/k, so a variant's pass gives them as the model's own pass does
VARIANT_PRODUCTS = ("token_match", "inp", "lse", "entropy", "key_mass")


@dataclass(frozen=True)
class Option:
    """A ``ScanConfig`` field owned by one measure (or the engine).

    Attributes:
        name: field name (unique over the registry).
        default: default value (immutable: tuples, numbers, bools).
        help: one line for ``ScanConfig``'s docstring and ``interp scan --measure list``.
        check: ``value -> error message or None``; the message becomes a ``ConfigError``.
        convert: ``value -> value`` applied first (e.g. JSON lists back to tuples).
        to_json: ``value -> JSON-ready value`` for ``ScanConfig.to_dict``.
    """

    name: str
    default: Any
    help: str
    check: Callable[[Any], str | None] | None = None
    convert: Callable[[Any], Any] | None = None
    to_json: Callable[[Any], Any] | None = None


@dataclass(frozen=True)
class Column:
    """A ``heads.csv`` column: ``name``, a one-line ``label`` (definition, paper and equation), ``heatmap`` (the
    report offers it as a layer x head heatmap), ``compare`` (the compare page shows its distribution per model as a
    box and its median in the summary)."""

    name: str
    label: str
    heatmap: bool = True
    compare: bool = False


@dataclass(frozen=True)
class Entry:
    """A state entry: additive float64 sums of shape ``shape``.

    Attributes:
        name: key in the state (unique over the registry).
        shape: full shape, with the layer axis and, for per-position entries, the position axis (last).
        layer_axis: the axis that indexes layers (``None``: filled once per prompt by ``update_prompt``).
        per_position: the last axis is a position or lag: states of prompts of different lengths are
            zero-padded on it when merged, and the engine adds a prompt's value at ``0..pos-1``.
    """

    name: str
    shape: tuple[int, ...]
    layer_axis: int | None = 0
    per_position: bool = False


@dataclass(frozen=True)
class Dims:
    """Sizes a state is allocated for: ``n_layers, n_heads, n_kv_heads, d_head`` of the model, ``n_pos`` the longest prompt."""

    n_layers: int
    n_heads: int
    n_kv_heads: int
    d_head: int
    n_pos: int

    @property
    def n_freq(self) -> int:
        """Rotation planes per head (``d_head // 2``)."""
        return self.d_head // 2


@dataclass
class LayerInput:
    """What ``Measure.update`` sees for one layer of one prompt.

    Attributes:
        layer, prompt_id: the layer and the prompt's global index.
        tokens: ``[pos]`` token ids of the prompt.
        q_pre, q_rot: ``[pos, head, d_head]`` float32 queries before / after RoPE; k_pre, k_rot: ``[pos, kv_head, d_head]``.
        scale, window, softcap: the layer's logit scale, sliding window (None: full causal) and soft-cap (None: none).
        card: the model card (``interp.models.ModelCard``); config: the ``ScanConfig``.
        products: the requested products of the tiled pass (``PRODUCTS``).
        value: ``[pos, kv_head, d_head]`` float32 values the layer attends with (None where an engine does not pass
            them; the ``massive`` measure needs them).
        native: ``(q_rot, k_rot, value)`` as the layer computed them, in the model's dtype (None where an engine does
            not pass them): a 16-bit model's own values, which GPU products can read on tensor cores without rounding.
    """

    layer: int
    prompt_id: int
    tokens: torch.Tensor | None
    q_pre: Float[torch.Tensor, "pos head d_head"]
    k_pre: Float[torch.Tensor, "pos kv_head d_head"]
    q_rot: Float[torch.Tensor, "pos head d_head"]
    k_rot: Float[torch.Tensor, "pos kv_head d_head"]
    scale: float
    window: int | None
    softcap: float | None
    card: Any
    config: Any
    products: Mapping[str, Any] = field(default_factory=dict)
    value: Float[torch.Tensor, "pos kv_head d_head"] | None = None
    native: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None

    @property
    def n_pos(self) -> int:
        """The prompt's length."""
        return self.q_rot.shape[0]


@dataclass
class PromptInput:
    """What ``Measure.update_prompt`` sees once per prompt: ``n_pos``, ``tokens [pos]``, ``prompt_id``, ``card``, ``config``."""

    n_pos: int
    tokens: torch.Tensor | None
    prompt_id: int
    card: Any
    config: Any


class Summed(Protocol):
    """Summed sums and their context (``interp.ScanResult`` is one): ``state``, ``card``, ``config``, ``meta``."""

    state: Mapping[str, torch.Tensor]
    card: Any
    config: Any
    meta: dict


def prompt_count(s: Summed) -> torch.Tensor:
    """Number of prompts summed into ``s`` (a float64 scalar tensor)."""
    return s.state["prompts"][0]


def kv_index(card) -> torch.Tensor:
    """``[head]``: the kv head each query head reads (``h // (n_heads // n_kv_heads)``)."""
    return torch.arange(card.n_heads) // card.group_size


class Measure:
    """Base class of a measure family (see the module docstring). Subclasses set the class attributes and
    implement ``columns``, ``entries``, ``update`` and ``compute`` (``update_prompt`` when they have per-prompt entries)."""

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""  # one line for `interp scan --measure list`
    options: ClassVar[tuple[Option, ...]] = ()
    switch: ClassVar[str | None] = None
    products: ClassVar[tuple[str, ...]] = ()
    variant_products: ClassVar[tuple[str, ...]] = ()

    def enabled(self, cfg) -> bool:
        """Whether this measure runs under ``cfg`` (always, or when its ``switch`` option is on)."""
        return self.switch is None or bool(getattr(cfg, self.switch))

    def needs(self, cfg) -> set[str]:
        """Products of the tiled pass this measure reads under ``cfg`` (default: ``products``)."""
        return set(self.products)

    def variant_needs(self, cfg) -> set[str]:
        """Products each counterfactual pass must carry for this measure under ``cfg``, besides ``lag`` and ``key0``
        (default: ``variant_products``); read as ``x.products["variants"][v][name]``."""
        return set(self.variant_products)

    def lag_window(self, cfg) -> tuple[tuple[int, int], ...] | None:
        """The lags of the ``lag`` product this measure reads under ``cfg``: inclusive ``(lo, hi)`` ranges, or None for
        every lag (the default). The engine computes the union over the enabled measures that need ``lag`` and may
        leave the sums of other lags at 0 (the GPU engine then skips the tiles that hold only such lags), so a measure
        that declares a window must not read other lags (``interp.measures.slash`` scores them NaN)."""
        return None

    def columns(self, cfg) -> Sequence[Column]:
        """The ``heads.csv`` columns this measure produces under ``cfg``, in order."""
        raise NotImplementedError

    def entries(self, dims: Dims, cfg) -> Sequence[Entry]:
        """The state entries this measure fills under ``cfg`` for a model and prompt length ``dims``."""
        raise NotImplementedError

    def update(self, x: LayerInput) -> dict[str, torch.Tensor]:
        """One layer of one prompt -> ``{entry: value}`` (shape of the entry without its layer axis; per-position
        entries with ``x.n_pos`` on the last axis)."""
        return {}

    def update_prompt(self, x: PromptInput) -> dict[str, torch.Tensor]:
        """Once per prompt -> values of this measure's entries that have no layer axis."""
        return {}

    def compute(self, s: Summed) -> dict[str, torch.Tensor]:
        """Summed state -> ``{column: [layer, head] tensor}`` for every column of ``columns(s.config)``."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<measure {self.name}>"


class RegistryError(ValueError):
    """A measure that cannot be registered (duplicate name, option, column or state entry; bad declaration)."""


class Registry:
    """Ordered measure families; ``register`` refuses duplicates. Column order of ``heads.csv`` = registration order."""

    def __init__(self, reserved_options: Sequence[Option] = (), reserved_columns: Sequence[str] = ()):
        self._measures: dict[str, Measure] = {}
        self.reserved_options = tuple(reserved_options)  # the engine's own options (block_size)
        self.reserved_columns = tuple(reserved_columns)  # layer, head, kv_head
        self.options_frozen = False  # set when interp.engine builds ScanConfig from the options

    def __iter__(self):
        return iter(self._measures.values())

    def __len__(self) -> int:
        return len(self._measures)

    def __contains__(self, name: str) -> bool:
        return name in self._measures

    def __getitem__(self, name: str) -> Measure:
        """The measure called ``name``.

        Raises:
            KeyError: no such measure (the message lists the registered ones).
        """
        if name not in self._measures:
            raise KeyError(f"no measure {name!r}; registered: {', '.join(self._measures)} (interp scan --measure list)")
        return self._measures[name]

    def options(self) -> list[Option]:
        """Every option, the engine's first, then each measure's in registration order."""
        return [*self.reserved_options, *(o for m in self for o in m.options)]

    def probe_config(self, **overrides):
        """A stand-in config with every option at its default and every switch on (for declaration checks)."""
        from types import SimpleNamespace

        values = {o.name: o.default for o in self.options()}
        values.update({m.switch: True for m in self if m.switch})
        values.update(overrides)
        return SimpleNamespace(**values)

    def register(self, measure: Measure) -> Measure:
        """Add ``measure`` at the end (its columns come after those registered before).

        Raises:
            RegistryError: its name, an option, a column or a state entry is already claimed, an unknown product
                is named, a switch is not one of its own options, or a per-position entry's layer axis is last.
        """
        if not measure.name or measure.name in self._measures:
            raise RegistryError(f"measure name {measure.name!r} is empty or already registered")
        if self.options_frozen and measure.options:
            raise RegistryError(f"measure {measure.name!r} declares options, but ScanConfig was already built from the registry: "
                                "register it before interp.engine is imported (an entry point in the group 'interp.measures' "
                                "does this), or declare no options")
        taken = {o.name for o in self.options()}
        clash = [o.name for o in measure.options if o.name in taken]
        if clash:
            raise RegistryError(f"measure {measure.name!r}: option(s) {clash} already owned by another measure or the engine")
        if measure.switch is not None and measure.switch not in {o.name for o in measure.options}:
            raise RegistryError(f"measure {measure.name!r}: its switch {measure.switch!r} must be one of its own options")
        unknown = set(measure.products) - set(PRODUCTS)
        if unknown:
            raise RegistryError(f"measure {measure.name!r} reads unknown products {sorted(unknown)}; known: {sorted(PRODUCTS)}")
        unknown = set(measure.variant_products) - set(VARIANT_PRODUCTS)
        if unknown:
            raise RegistryError(f"measure {measure.name!r} asks counterfactual passes for {sorted(unknown)}; they can carry "
                                f"{sorted(VARIANT_PRODUCTS)} (and always lag, key0)")
        self._measures[measure.name] = measure
        try:
            cfg = self.probe_config()
            dims = Dims(2, 4, 2, 8, 16)
            cols = [c.name for m in self for c in m.columns(cfg)]
            dup = sorted({c for c in cols if cols.count(c) > 1} | (set(cols) & set(self.reserved_columns)))
            if dup:
                raise RegistryError(f"measure {measure.name!r}: column(s) {dup} already produced by another measure")
            keys = [e.name for m in self for e in m.entries(dims, cfg)] + ["prompts"]
            dup = sorted({k for k in keys if keys.count(k) > 1})
            if dup:
                raise RegistryError(f"measure {measure.name!r}: state entr(y/ies) {dup} already claimed by another measure")
            for e in measure.entries(dims, cfg):
                if e.per_position and e.layer_axis is not None and e.layer_axis in (len(e.shape) - 1, -1):
                    raise RegistryError(f"measure {measure.name!r}: entry {e.name!r} is per-position on its layer axis")
        except RegistryError:
            del self._measures[measure.name]
            raise
        return measure

    def enabled(self, cfg) -> list[Measure]:
        """The measures that run under ``cfg``, in order."""
        return [m for m in self if m.enabled(cfg)]

    def owner(self, option: str) -> str:
        """Name of the measure that owns ``option`` (``"engine"`` for the engine's own).

        Raises:
            KeyError: no one owns it.
        """
        if option in {o.name for o in self.reserved_options}:
            return "engine"
        for m in self:
            if option in {o.name for o in m.options}:
                return m.name
        raise KeyError(f"no measure owns the option {option!r}")

    def column_labels(self, cfg=None) -> dict[str, str]:
        """``{column: label}`` of every measure (all switched on when ``cfg`` is None)."""
        cfg = cfg if cfg is not None else self.probe_config()
        return {c.name: c.label for m in self for c in m.columns(cfg)}

    def compare_columns(self, cfg=None) -> list[str]:
        """Columns the compare page summarises per model (box plot and median), in order."""
        cfg = cfg if cfg is not None else self.probe_config()
        return [c.name for m in self for c in m.columns(cfg) if c.compare]

    def heatmap_columns(self, cfg=None) -> list[str]:
        """Columns the report offers as layer x head heatmaps, in order."""
        cfg = cfg if cfg is not None else self.probe_config()
        return [c.name for m in self for c in m.columns(cfg) if c.heatmap]
