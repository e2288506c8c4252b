"""``LoadedModel``: the plain HF model (used by the scan), its tokenizer, card and a lazily booted TransformerBridge."""

from __future__ import annotations

import copy
import functools

import torch

from interp.errors import UnsupportedModelError
from interp.models.card import ModelCard
from interp.models.scope import _first_line, hub_offline

# --------------------------------------------------------------------------------------------
# Loaded model
# --------------------------------------------------------------------------------------------


class LoadedModel:
    """A loaded model: the plain HF model (used by the scan), its tokenizer, card and bridge.

    ``bridge`` is a TransformerLens ``TransformerBridge`` booted lazily on a copy of the HF model
    (the bridge rewires the modules it wraps and forces eager attention; the scan keeps the
    untouched model). Use the bridge for hook-based exploration (``run_with_cache``) on the families
    TransformerLens supports; interp's own capture (``interp.capture``) works on every covered family.
    """

    def __init__(self, hf_model: torch.nn.Module, tokenizer, card: ModelCard, hub_id: str):
        self.hf = hf_model.eval()
        self.tokenizer = tokenizer
        self.card = card
        self._hub_id = hub_id
        self._bridge = None

    @property
    def bridge(self):
        """The TransformerLens ``TransformerBridge`` over a copy of this model (eager attention).

        Raises:
            UnsupportedModelError: TransformerLens has no adapter for this architecture.
        """
        if self._bridge is None:
            from transformer_lens.model_bridge import TransformerBridge

            hf_copy = copy.deepcopy(self.hf)
            hf_copy.config._attn_implementation = "eager"
            try:
                with hub_offline():  # the bridge gets the model and tokenizer; it must not look anything up
                    self._bridge = TransformerBridge.boot_transformers(self._hub_id, hf_model=hf_copy, tokenizer=self.tokenizer)
            except Exception as err:  # noqa: BLE001  TransformerLens raises many types for an architecture it lacks
                raise UnsupportedModelError(f"TransformerLens' bridge cannot wrap {self.card.name} ({type(err).__name__}: "
                                            f"{_first_line(err)}); interp.capture and the scan work without it") from None
            self._bridge.eval()
        return self._bridge

    @property
    def device(self) -> torch.device:
        """Device of the model's parameters."""
        return next(self.hf.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        """Dtype of the model's parameters."""
        return next(self.hf.parameters()).dtype

    @functools.cached_property
    def bos_token_id(self) -> int | None:
        """BOS id to start prompts with, where the tokenizer itself adds one (Gemma-3); else None."""
        from interp.models.grid import bos_id

        return bos_id(self.tokenizer)

    def to(self, device: str | torch.device) -> "LoadedModel":
        """Move the HF model (and a booted bridge) to ``device``; returns self."""
        self.hf.to(device)
        if self._bridge is not None:
            self._bridge.to(device)
        return self

    def __repr__(self) -> str:
        c = self.card
        return f"LoadedModel({c.name}: {c.n_layers} layers, {c.n_heads} heads, {c.n_kv_heads} kv heads, d_head {c.d_head})"
