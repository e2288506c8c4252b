"""The synthetic lab: small decoders with pluggable position encodings, trained on CPU on the tasks of
papers 000 (copying, 2D-RoPE), 002 (Dyck depth) and 003 (sparse parity, position coupling), and byte-level
language models on Python's own documentation with a passkey probe (``text_lm``; paper 001's RoPE-ID comparison), and
paper 004's App. D setting: in-context regression and its reduced two-layer RoPE transformer (``icl_regression``).

A trained lab model is an interp model like any other (``lab_loaded``): capture, ``verify_attention``,
``scan`` and the reports work on it. Nothing in the rest of ``interp`` imports the lab; saved lab models
load through ``interp.load_model("local:DIR")`` by the package's ``interp.models`` entry point.

Modules: ``vocab`` (symbols and tokenizer), ``model`` (``LabConfig``, ``LabForCausalLM``, position encodings),
``train`` (``train_model``), ``loaded`` (``lab_loaded``, ``save_lab``, ``load_lab``), ``checkpoints`` (``python -m
interp.lab.checkpoints DIR``: train a small text model and save checkpoints with their training log, for
``interp trajectory``); one module per task.
"""

from interp.lab.model import PES, LabConfig, LabForCausalLM, alibi_slopes, register
from interp.lab.vocab import Vocab
from interp.lab.train import TrainConfig, lm_loss, pad_batch, train_model
from interp.lab.loaded import lab_loaded, load_lab, save_lab

register()

__all__ = ["PES", "LabConfig", "LabForCausalLM", "Vocab", "TrainConfig", "train_model", "lm_loss", "pad_batch",
           "lab_loaded", "save_lab", "load_lab", "alibi_slopes", "register"]
