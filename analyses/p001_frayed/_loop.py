"""The per-model loop of paper 001's length scripts (``cluster_length``, ``key_norm_length``, ``frayed_rope``,
``frayed_bootstrap``): each model of the run loaded, its prompts drawn past the context, the time since the load.

    for run in model_runs(args, n_prompts=args.prompts, tokens=max(lengths)):
        ...  # run.name, run.model, run.prompts
        print(f"{run.name}: ... in {run.seconds():.0f} s")
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass

import interp

from analyses._common import QUICK_MODEL, installed


@dataclass
class ModelRun:
    """One model of a run: ``model`` and ``prompts`` (``[prompt, token]``) are ``None`` for a model whose results are
    read from disk (``saved``); ``t0`` is when its load began (``time.perf_counter``)."""

    name: str
    model: object | None
    prompts: object | None
    t0: float

    def seconds(self) -> float:
        """Seconds since the model's load began."""
        return time.perf_counter() - self.t0


def run_names(args, saved: Collection[str] = ()) -> list[str]:
    """The models of a run: ``tiny-llama`` in quick mode, else those of ``args.models`` that are installed or in
    ``saved`` (in their order; one line names each other one, :func:`analyses._common.installed`)."""
    if args.quick:
        return [QUICK_MODEL]
    have = set(installed([m for m in args.models if m not in saved]))
    return [m for m in args.models if m in saved or m in have]


def model_runs(args, n_prompts: int, tokens: int | Callable[[object], int], corpus: str = "pydoc", device: str = "cpu",
               saved: Collection[str] = ()) -> Iterator[ModelRun]:
    """Each model of :func:`run_names` in turn, loaded on ``device``, with ``n_prompts`` prompts of ``tokens`` tokens
    drawn past the context (``interp.corpus.prompts(..., beyond_context=True)``): random tokens in quick mode, else
    ``corpus``; ``tokens`` may be a function of the loaded model's card (lengths in multiples of its context). A model in ``saved`` is not loaded (its ``model`` and ``prompts`` are ``None``). Once the loop body is
    done with a run, its ``model`` and ``prompts`` are set to ``None``, so the next model loads with this one freed."""
    for name in run_names(args, saved):
        run = ModelRun(name, None, None, time.perf_counter())
        if name not in saved:
            run.model = interp.load_model(name, device=device)
            n_tokens = tokens(run.model.card) if callable(tokens) else tokens
            run.prompts = interp.corpus.prompts(run.model, "random" if args.quick else corpus, n_prompts, n_tokens,
                                                beyond_context=True)
        yield run
        run.model = run.prompts = None
