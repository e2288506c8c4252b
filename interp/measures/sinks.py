"""Attention sinks (paper 001; Gu et al. 2024, "When Attention Sink Emerges").

- Sink weight: mean over queries of ``A[i, 0]`` -- with RoPE (what the model does) and the pre-RoPE
  counterfactual (softmax of ``q_pre . k_pre`` with the same scale, mask and soft-cap).
- The counterfactual needs each query's log-sum-exp over all its keys, one more ``Q K^T`` per layer (about a quarter
  of a CPU scan at 8192 tokens, a third of a GPU scan at 32k). By default it is estimated from a seeded stratified
  sample of ``counterfactual_queries`` (256) query positions per prompt (``interp.attention.stratified_rows``: one
  position drawn in each of 256 equal strata, seeded by the prompt's index; an unbiased estimate of the mean, exact
  rows, float32), which costs ``256 / pos`` of that pass; ``counterfactual_queries=0`` computes every query (the
  exact mean; the paper-001 analyses use it). Prompts of at most 256 tokens are exact either way (computed in the
  attention kernel's own pass then).
- Importance of token 0 (Gu et al.): mean of ``A[i, 0]`` over the queries that can see it, which for
  token 0 is every query, so it equals the sink weight; a head *has a sink* when it exceeds
  epsilon = 0.3. The sink rate of a model is the fraction of heads that have one.

Per-prompt means are summed over prompts, then divided by the prompt count.
"""

from __future__ import annotations

import torch

from interp.measures.base import Column, Entry, Measure, Option, prompt_count

SINK_EPS = 0.3


def sink_flag(weight: torch.Tensor, eps: float = SINK_EPS) -> torch.Tensor:
    """True where the importance of token 0 exceeds ``eps`` (Gu et al. 2024)."""
    return weight > eps


class Sinks(Measure):
    """Sink weight with RoPE and in the pre-RoPE counterfactual, and the sink flag (module docstring)."""

    name = "sinks"
    summary = "mean attention on token 0 with RoPE and pre-RoPE counterfactual; sink flag at importance > 0.3 (001; Gu et al. 2024)"
    options = (
        Option("sink_eps", SINK_EPS, "importance threshold of a sink head (Gu et al. 2024: 0.3)"),
        Option("counterfactual_sinks", True, "also compute the pre-RoPE sink weight (one more QK^T per layer)"),
        Option("counterfactual_queries", 256, "query positions per prompt for the pre-RoPE sink weight: a seeded stratified "
               "sample (an unbiased estimate at a fraction of the cost); 0 = every query (exact)",
               check=lambda v: None if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else
               f"counterfactual_queries must be an integer >= 0 (0 = every query, exact), got {v!r}"),
    )
    products = ("key0",)

    def needs(self, cfg):
        return {"key0", "key0_pre"} if cfg.counterfactual_sinks else {"key0"}

    def columns(self, cfg):
        return [Column("sink_weight", "sink weight: mean over queries of A[i, 0], mean over prompts (001; Gu et al. 2024)", compare=True),
                Column("sink_weight_norope", "the same in the pre-RoPE counterfactual, softmax of q_pre . k_pre (001), over "
                       "counterfactual_queries stratified query rows per prompt (0: all); NaN when counterfactual_sinks is off"),
                Column("has_sink", "importance of token 0 (= sink_weight) > sink_eps (0.3) (Gu et al. 2024)", heatmap=False)]

    def entries(self, dims, cfg):
        return [Entry("sink_rope", (dims.n_layers, dims.n_heads)), Entry("sink_norope", (dims.n_layers, dims.n_heads))]

    def update(self, x):
        out = {"sink_rope": x.products["key0"].double().mean(-1)}
        if x.config.counterfactual_sinks:
            out["sink_norope"] = x.products["key0_pre"].double()  # [head]: already the (estimated) mean over queries
        return out

    def compute(self, s):
        P, cfg = prompt_count(s), s.config
        w = s.state["sink_rope"] / P
        L, H = w.shape
        return {"sink_weight": w,
                "sink_weight_norope": s.state["sink_norope"] / P if cfg.counterfactual_sinks else torch.full((L, H), torch.nan),
                "has_sink": sink_flag(w, cfg.sink_eps)}


class SinkRate(Measure):
    """Per-prompt sink hits, for the sink rate as Gu et al. (2024) define it: a head counts as having a sink in a
    prompt when that prompt's importance of token 0 (mean over queries of ``A[i, 0]``) exceeds ``sink_eps``;
    ``sink_prompt_frac`` is the share of prompts where it does, and the model's sink rate is its mean over heads
    (``sail-sg/Attention-Sink``, ``eval_sink_open_source.py``: threshold each sample, then average). ``has_sink``
    thresholds the importance averaged over prompts instead; the two rates differ when heads sink in some prompts only."""

    name = "sink_rate"
    summary = "share of prompts in which a head's importance of token 0 exceeds sink_eps (Gu et al. 2024's sink rate)"
    products = ("key0",)

    def columns(self, cfg):
        return [Column("sink_prompt_frac", "share of prompts whose importance of token 0 (mean_i A[i, 0]) > sink_eps; "
                       "its mean over heads is the sink rate (Gu et al. 2024)")]

    def entries(self, dims, cfg):
        return [Entry("sink_prompt_hits", (dims.n_layers, dims.n_heads))]

    def update(self, x):
        return {"sink_prompt_hits": (x.products["key0"].double().mean(-1) > x.config.sink_eps).double()}

    def compute(self, s):
        return {"sink_prompt_frac": s.state["sink_prompt_hits"] / prompt_count(s)}


def sink_rates(heads) -> dict[str, float]:
    """The model's two sink rates from a head table: ``gu`` (mean of ``sink_prompt_frac``, Gu et al. 2024) and
    ``of_mean`` (share of heads with ``has_sink``, the threshold on the importance averaged over prompts); NaN where
    the column is absent (a scan written before ``sink_prompt_frac`` existed)."""
    import math

    gu = float(heads["sink_prompt_frac"].mean()) if "sink_prompt_frac" in heads and heads["sink_prompt_frac"].notna().any() else math.nan
    return {"gu": gu, "of_mean": float(heads["has_sink"].mean())}
