"""Lab models as interp models: wrap, save and load, so capture, verify, scan and reports treat them like the zoo.

Imports ``interp.models`` (the core never imports the lab).
"""

from __future__ import annotations

from pathlib import Path

import torch

from interp.lab.model import LabForCausalLM, register
from interp.lab.vocab import Vocab
from interp.models import LoadedModel, make_card
from interp.models.scope import quiet


def lab_loaded(model: LabForCausalLM, vocab: Vocab, name: str = "lab", *, source: str = "") -> LoadedModel:
    """An ``interp.LoadedModel`` over a lab model (trained or built in memory) and its vocabulary.

    ``interp.capture``, ``verify_attention``, ``interp.scan`` and ``write_report`` accept it. The card's
    ``d_head`` is the attention call's width (``d_model / n_heads``, plus ALiBi's extra plane) and its
    context length is ``max_positions``. The model is put in eval mode; TransformerLens' bridge has no
    adapter for it (``.bridge`` raises ``UnsupportedModelError``).

    Raises:
        UnsupportedModelError: never for a ``LabForCausalLM`` (raised by ``make_card`` for foreign models).
    """
    register()
    model.eval()
    cfg = model.config
    src = source or f"interp.lab (pe={cfg.pe}, {cfg.n_layers} layer(s), {cfg.n_heads} heads, d_model {cfg.d_model})"
    card = make_card(name, model, source=src, quantization=str(next(model.parameters()).dtype).removeprefix("torch."))
    return LoadedModel(model, vocab.tokenizer(), card, hub_id=name)


def save_lab(model: LabForCausalLM, vocab: Vocab, directory: str | Path) -> Path:
    """Save weights, config, tokenizer and vocabulary to ``directory`` (``interp.load_model("local:DIR")`` reads it),
    quietly (no transformers progress bar)."""
    d = Path(directory)
    with quiet():
        model.save_pretrained(d)
    vocab.save(d)
    return d


def load_lab(directory: str | Path, dtype: torch.dtype = torch.float32) -> tuple[LabForCausalLM, Vocab]:
    """``(model, vocab)`` saved by ``save_lab``, the model in eval mode.

    Raises:
        FileNotFoundError: no ``lab_vocab.json`` or ``config.json`` in ``directory``.
    """
    register()
    d = Path(directory)
    if not (d / "config.json").exists():
        raise FileNotFoundError(f"{d / 'config.json'} not found: save the model with interp.lab.save_lab(model, vocab, dir)")
    return LabForCausalLM.from_pretrained(d, dtype=dtype).eval(), Vocab.load(d)
