"""Per-head measurements: the Measure protocol (``base``) and one module per measure family, registered below.

Every statistic that sums over tokens is kept as additive state (``State``: named float64 tensors), so
prompts, shards and machines merge by addition, in any order. A family is one module that declares its
options, ``heads.csv`` columns, state entries and the attention products it reads next to its math
(``interp.measures.base``). ``REGISTRY`` drives the engine (state allocation, the per-layer collector, the head
table, the load check), the report's heatmap menu, the compare page, the CLI's ``--measure`` and the contract
test. Adding a measure: one module plus one ``register`` line here, or, from another package, an entry point in
the group ``interp.measures`` whose object is a ``Measure`` instance (or a zero-argument callable returning one).

Registered families, in ``heads.csv`` column order: ``slash`` (average slash score, SDH; 004 Def. 3.1),
``spectrum`` (r1, R_tau, stable rank, FSV ratio; 004 eq. 7, 001), ``norms`` (norm relative variation,
key-0 norm; 004, 001), ``sinks`` (sink weight with and without RoPE, sink flag; 001, Gu et al. 2024), ``sink_rate`` (per-prompt sink hits; Gu et al. 2024),
``inp`` (optional: per-plane InP, active planes; 004 eq. 8-9), ``geometry`` (optional: cloud and sink geometry
across length; 001), ``cone`` (mean pairwise cosines; 001 Fig. 2), ``token_match`` (optional: previous-token, duplicate-token,
induction scores; TransformerLens ``head_detector``), ``echo`` (optional: echo score on repeated prompts;
RazorAttention), ``massive`` (optional: per-channel norms of q, k, v and massive
channels; Jin et al. 2025), ``shape`` (optional: entropy, vertical mass, A-shape and vertical-slash coverage with
MInference's estimate, distant mass; StreamingLLM, MInference, DuoAttention), ``kv_budget`` (optional: distant mass and slash score predicted
from the pre-RoPE cone and the RoPE frequencies, kvpress's on-the-fly DuoAttention score; 004 Sec. 4, App. D), ``heavy_hitters`` (optional: attention mass per
key token id, a count-min sketch; no columns), ``maps`` (average attention of the first
positions; no columns), ``variants`` (counterfactual RoPE variants; 004 Table 5; no columns of its own).

Modules outside the scan's registry (whole-capture or weight analyses): ``interp.experiments.projection`` (PCA snapshot),
``interp.experiments.embedding_cone`` (layer-0 embedding cone), ``interp.rope.clouds`` (closed-form rotated clouds).
"""

from __future__ import annotations

from importlib.metadata import entry_points

from interp.measures.base import (PRODUCTS, VARIANT_PRODUCTS, Column, Dims, Entry, LayerInput, Measure, Option, PromptInput, Registry,
                                  RegistryError, Summed, kv_index, prompt_count)
from interp.measures.state import State

ENGINE_OPTIONS = (Option("block_size", 32, "queries per attention block (memory ~ head * block_size * pos floats)",
                         check=lambda v: None if v >= 1 else f"block_size must be >= 1, got {v}"),
                  Option("map_size", 64, "side M of the map of the first positions (tile product 'map'; the maps and inp measures)",
                         check=lambda v: None if v >= 1 else f"map_size must be >= 1, got {v}"))

REGISTRY = Registry(reserved_options=ENGINE_OPTIONS, reserved_columns=("layer", "head", "kv_head"))
register = REGISTRY.register


def _builtin() -> None:
    from interp.measures import (cone, echo, geometry, heavy_hitters, inp, kv_budget, maps, massive, norms, shape, sinks, slash,
                                 spectrum, token_match, variants)

    register(slash.Slash())
    register(spectrum.Spectrum())
    register(norms.Norms())
    register(sinks.Sinks())
    register(sinks.SinkRate())
    register(inp.InP())
    register(geometry.Geometry())
    register(cone.Cone())
    register(token_match.TokenMatch())
    register(echo.Echo())
    register(massive.Massive())
    register(shape.Shape())
    register(kv_budget.KVBudget())
    register(heavy_hitters.HeavyHitters())
    register(maps.Maps())
    register(variants.Variants())


def load_plugins(group: str = "interp.measures") -> list[str]:
    """Register the measures that installed packages declare in the entry-point ``group`` (once each).

    Returns:
        The names of the measures registered by this call.

    Raises:
        RegistryError: a plugin's measure clashes with a registered one (name, option, column or state entry).
    """
    added = []
    for ep in entry_points(group=group):
        obj = ep.load()
        measure = obj() if callable(obj) and not isinstance(obj, Measure) else obj
        if not isinstance(measure, Measure):
            raise RegistryError(f"entry point {ep.name!r} ({ep.value}) is not a Measure")
        if measure.name not in REGISTRY:
            register(measure)
            added.append(measure.name)
    return added


_builtin()
load_plugins()

__all__ = ["REGISTRY", "register", "load_plugins", "ENGINE_OPTIONS", "PRODUCTS", "VARIANT_PRODUCTS", "Column", "Dims", "Entry", "LayerInput",
           "Measure", "Option", "PromptInput", "Registry", "RegistryError", "State", "Summed", "kv_index", "prompt_count"]
