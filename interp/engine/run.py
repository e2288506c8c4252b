"""``scan``: run every prompt once through the model with its attention tapped, feeding every enabled measure.

How it stays at forward-pass cost: the HF model runs with its attention calls tapped (``interp.models.taps``) and the
collector (``interp.engine.collector``) computes each layer's attention exactly once, in query blocks, returning
``P @ V`` to the model and reducing the same probabilities into the measures' sums; no ``[head, pos, pos]`` tensor is
held. Pre-RoPE vectors are the post-RoPE ones with the model's own cos/sin tables undone (``interp.models.arch``). The decoder
stack runs without the LM head: the scan never reads logits.
"""

from __future__ import annotations

import time
from typing import Sequence

import torch

from interp.engine import kernels
from interp.models.arch import rope_specs
from interp.hooks.capture import as_tokens
from interp.engine.collector import Collector, check_engine, new_state
from interp.engine.config import ScanConfig
from interp.engine.result import ScanResult
from interp.models import LoadedModel
from interp.models.taps import attention_taps


def scan(
    model: LoadedModel,
    prompts: Sequence[torch.Tensor] | torch.Tensor,
    config: ScanConfig | None = None,
    *,
    progress: bool = False,
    meta: dict | None = None,
    prompt_ids: Sequence[int] | None = None,
    beyond_context: bool = False,
    engine: str = "auto",
) -> ScanResult:
    """Run every prompt once and accumulate every enabled measure (``interp.measures.REGISTRY``).

    Args:
        model: a loaded model.
        prompts: ``[prompt, pos]`` tensor or a list of ``[pos]`` token tensors (lengths may differ).
        config: settings; default ``ScanConfig()`` (the always-on measures; switch optional ones on with their option,
            e.g. ``ScanConfig(inp=True)``).
        progress: show a tqdm progress bar (one step per prompt).
        meta: extra entries for ``ScanResult.meta`` (corpus name, seed...).
        prompt_ids: global index of each prompt (default ``0..len-1``; shards pass their indices in the
            whole corpus so that merged results name the prompt of a content repeat).
        beyond_context: allow prompts longer than the model's context (out-of-distribution positions).
        engine: ``auto`` (Triton on CUDA, the fused kernel on CPU float32, else Python), ``triton``, ``cpu-kernel`` or
            ``python`` (``interp.engine.collector.ENGINES``); results agree to float rounding.

    Returns:
        ScanResult; ``.heads`` is the per-head table.

    Raises:
        PromptError / ShapeError: a prompt is empty, has bad ids, or exceeds the context.
        ValueError: ``prompt_ids`` has another length than ``prompts``.
        ConfigError: an engine that cannot run on the model's device (``interp.engine.collector.check_engine``).
    """
    from tqdm.auto import tqdm

    cfg = config or ScanConfig()
    toks = [as_tokens(model, p, beyond_context=beyond_context) for p in prompts]
    ids = list(prompt_ids) if prompt_ids is not None else list(range(len(toks)))
    if len(ids) != len(toks):
        raise ValueError(f"prompt_ids has {len(ids)} entries for {len(toks)} prompts")
    n_max = max(t.numel() for t in toks)
    state = new_state(model.card, n_max, cfg)
    check_engine(engine, model.device)
    collector = Collector(model.card, cfg, state, rope_specs(model.hf) if cfg.variants else None, engine=engine)
    if torch.device(model.device).type == "cpu" and engine in ("auto", "cpu-kernel"):
        kernels.available()  # the one-time build (~20 s) happens here, outside the timing in meta["seconds"]
    t0 = time.perf_counter()
    with torch.inference_mode(), attention_taps(model, collector):
        desc = f"scan {model.card.name}" + (f" ({meta['corpus']})" if meta and "corpus" in meta else "")
        for pid, t in tqdm(list(zip(ids, toks)), desc=desc, unit="prompt", disable=not progress):
            collector.begin_prompt(pid, t)
            # the decoder stack only: the scan reads attention, so the LM head (N x vocab logits) is skipped
            model.hf.base_model(t[None].to(model.device), use_cache=False)
            collector.end_prompt()
        collector.finish()  # GPU sums -> the CPU state, once per scan
    info = {"prompts": len(toks), "tokens": [int(t.numel()) for t in toks], "seconds": time.perf_counter() - t0,
            "engine": collector.engine, "prompt_ids": [int(i) for i in ids],
            "inv_freq": [spec.inv_freq.tolist() for spec in rope_specs(model.hf)],
            "sample_tokens": [model.tokenizer.decode([int(i)]) for i in toks[0][: cfg.map_size]]}
    return ScanResult(model.card, cfg, state, {**info, **(meta or {})})
