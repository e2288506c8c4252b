"""Counterfactual RoPE variants: slash scores and sink weight with the rotation changed, from the same pass.

For each ``RopeVariant`` in ``ScanConfig.variants`` (e.g. the band ablations of paper 004 Table 5,
``interp.rope.band_ablations``), the engine recomputes every layer's attention from the captured pre-RoPE
q/k rotated by the variant (same scale times ``variant.logit_scale``, masks, soft-cap and GQA mapping),
exactly and block-wise like the model's own, and hands its per-lag sums and key-0 column to this measure
(product ``variants``). The model's forward is not changed. Columns come from ``interp.experiments.ablation``
(ratios to the original scores), so this measure has none of its own.

State: ``variant_slash_mean_sum [variant, layer, head, pos]`` (per-prompt mean of ``A[i, i - delta]`` as in
``interp.measures.slash``), ``variant_sink [variant, layer, head]`` (per-prompt mean of ``A[i, 0]``) and, when the
``token_match`` measure is on, ``variant_token_match [variant, layer, head, 3]`` (its per-prompt scores under the
variant: previous-token, duplicate-token, induction; ``interp.measures.token_match``).
"""

from __future__ import annotations

import torch
from jaxtyping import Float

from interp.measures.base import Entry, Measure, Option
from interp.measures.slash import lag_means, prompt_slash
from interp.rope import RopeVariant, variant_from_dict, variant_to_dict


def _as_variants(value) -> tuple[RopeVariant, ...]:
    return tuple(v if isinstance(v, RopeVariant) else variant_from_dict(v) for v in value)


def _check(value) -> str | None:
    names = [v.name for v in value]
    return None if len(set(names)) == len(names) else f"counterfactual variants need unique names, got {names}"


class Variants(Measure):
    """Counterfactual RoPE variants (module docstring); on when ``ScanConfig.variants`` is non-empty."""

    name = "variants"
    summary = "slash scores and sink weight under counterfactual RoPE variants, e.g. band ablations (004 Table 5); set by interp ablate"
    options = (Option("variants", (), "counterfactual RoPE variants (interp.rope.RopeVariant, e.g. interp.rope.band_ablations): "
                      "attention recomputed from the pre-RoPE q/k rotated by each; names must be unique",
                      check=_check, convert=_as_variants, to_json=lambda vs: [variant_to_dict(v) for v in vs]),)
    products = ("variants",)
    variant_products = ("token_match",)

    def enabled(self, cfg) -> bool:
        return bool(cfg.variants)

    def variant_needs(self, cfg) -> set[str]:
        """Token-matched sums under each variant when the token_match measure is on (``variant_token_match``)."""
        return {"token_match"} if cfg.token_match else set()

    def columns(self, cfg):
        return []

    def entries(self, dims, cfg):
        V, L, H, N = len(cfg.variants), dims.n_layers, dims.n_heads, dims.n_pos
        out = [Entry("variant_slash_mean_sum", (V, L, H, N), layer_axis=1, per_position=True),
               Entry("variant_sink", (V, L, H), layer_axis=1)]
        if cfg.token_match:
            out.append(Entry("variant_token_match", (V, L, H, 3), layer_axis=1))
        return out

    def update(self, x):
        lags, sinks, tms = [], [], []
        for p in x.products["variants"]:
            lags.append(prompt_slash(p["lag"], x.n_pos, x.config.skip)["slash_mean_sum"])
            sinks.append(p["key0"].double().mean(-1))
            tms.append(p.get("token_match"))
        out = {"variant_slash_mean_sum": torch.stack(lags), "variant_sink": torch.stack(sinks)}
        if x.config.token_match:
            out["variant_token_match"] = torch.stack(tms).double() / x.n_pos
        return out

    def compute(self, s):
        return {}


def variant_index(cfg, name: str) -> int:
    """Position of the counterfactual variant ``name`` in the state's ``variant`` axis.

    Raises:
        KeyError: no variant of that name was scanned (the message lists those that were).
    """
    names = [v.name for v in cfg.variants]
    if name not in names:
        raise KeyError(f"no counterfactual variant {name!r} in this scan; it has {names or 'none'} (set ScanConfig.variants)")
    return names.index(name)


def variant_scores(s, name: str) -> Float[torch.Tensor, "layer head delta"]:
    """``[layer, head, delta]`` average slash score under the counterfactual variant ``name`` (NaN where undefined).

    Raises:
        KeyError: the scan has no variant of that name.
    """
    return lag_means(s.state, s.state["variant_slash_mean_sum"][variant_index(s.config, name)])


def variant_token_scores(s, name: str) -> Float[torch.Tensor, "layer head 3"]:
    """``[layer, head, 3]`` previous-token, duplicate-token and induction scores (``interp.measures.token_match``,
    TransformerLens ``detect_head``) under the variant ``name``, mean over prompts.

    Raises:
        KeyError: the scan has no variant of that name, or ran without the token_match measure.
    """
    if "variant_token_match" not in s.state:
        raise KeyError("this scan has no token-matched scores under its variants: scan with ScanConfig(token_match=True)")
    return s.state["variant_token_match"][variant_index(s.config, name)] / s.state["prompts"][0]


def variant_sink_weight(s, name: str) -> Float[torch.Tensor, "layer head"]:
    """``[layer, head]`` sink weight (mean attention on token 0) under the variant ``name``, mean over prompts.

    Raises:
        KeyError: the scan has no variant of that name.
    """
    return s.state["variant_sink"][variant_index(s.config, name)] / s.state["prompts"][0]

