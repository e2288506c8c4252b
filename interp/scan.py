"""The scan engine: one forward pass per prompt feeds every per-head accumulator.

How it stays at forward-pass cost: the HF model runs with its attention calls tapped
(``interp.taps``). For each layer the tap hands over post-RoPE queries, keys and values with the
model's scale, window and soft-cap; the scan computes the layer's attention *exactly* in query
blocks (all heads at once, exact row normalisers, causal + sliding-window masks, GQA mapping),
returns the output ``P @ V`` to the model and reduces the same probabilities into the accumulators.
Attention is therefore computed once per layer; no ``[head, pos, pos]`` tensor is held. Pre-RoPE
vectors are the post-RoPE ones with the model's own cos/sin tables undone (``interp.arch``), which
is exact for every covered family. On CPU the layer's work runs in the fused kernel of
``interp.kernels`` (tiles kept in cache, both cores on independent tiles); elsewhere (CUDA), or
without a compiler, in the Python block path of ``interp.attention``. Work is float32 whatever the
model's dtype; sums are float64. The decoder stack runs without the LM head: the scan never reads logits.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import pandas as pd
import torch

from interp import kernels
from interp.attention import attention_blocks, key_weight, lag_sums
from interp.capture import as_tokens
from interp.errors import ConfigError, CorruptStateError, NumericsError
from interp.models import LoadedModel, ModelCard
from interp.arch import rope_specs
from interp.taps import AttentionCall, attention_taps
from interp.rope import RopeSpec, RopeVariant, default_inv_freq, rotate_variant, variant_from_dict, variant_to_dict
from interp.stats import State, cone, freq, geometry, maps, norms, slash, sinks, spectrum



@dataclass
class ScanConfig:
    """Settings of a scan (defaults follow papers 004 and 001; see the README).

    Attributes:
        block_size: queries per attention block (memory ~ head * block_size * pos floats).
        kappa: SDH threshold for short lags ``short_lags`` (paper 004: 0.1, lags 0..4).
        long_lags: ``(lo, hi)`` inclusive range of long lags (paper 004 App. C: 500..5000).
        long_min_entries: a long lag counts only if each prompt has at least this many entries
            ``A[i, i - delta]`` (paper 004 used 6000-token prompts and delta <= 5000: >= ~1000); lags
            near the prompt length rest on a handful of entries next to the sink positions.
        kappa_long: SDH threshold for long lags (1e-3).
        long_min_frac: a long lag is slash-dominant only if it is so in at least this fraction of the
            prompts that reach it (default 2/3; see ``interp.stats.slash``: one prompt's repeated passage
            must not make a long-range SDH).
        skip: positions excluded from slash scores (0..3).
        sink_eps: importance threshold of a sink head (Gu et al.: 0.3).
        map_size: side of the stored average attention map of the first positions.
        counterfactual_sinks: also compute the pre-RoPE sink weight (one more QK^T per layer).
        tau: cumulative energy for R_tau (0.95).
        variants: counterfactual RoPE variants (``interp.rope.RopeVariant``, e.g. the band ablations of
            ``interp.rope.band_ablations``): for each, every layer's attention is recomputed from the captured
            pre-RoPE q/k rotated by the variant (same scale times ``variant.logit_scale``, masks, soft-cap
            and GQA mapping), exactly and block-wise like the model's own, and reduced into per-lag sums
            and the weight on token 0. The model's forward is not changed. Names must be unique.
        inp: also sum, per head and rotation plane, InP(i, j, l) = q_rot_i^(l) . k_rot_j^(l) and |InP| over
            every visible pair with keys >= ``skip`` (paper 004 eq. 8-9; ``interp.stats.freq``): one more pass
            over the pairs of each tile (about +50% scan time on the fused kernel).
        geometry: also the cloud and sink geometry of paper 001 (``interp.stats.geometry``): silhouette and
            Davies-Bouldin scores of the q vs k clusters, key norm and attention received by position, and the
            maximum q.k per query, pre and post RoPE (one more QK^T per layer and version; the cluster scores
            cost about 20 ms per head and prompt on 2 cores). ``interp sweep`` turns it on.
        cluster_points: points per head and prompt for the cluster scores (half queries, half keys, at the
            same seeded positions; seed = prompt id * 1009 + layer).
    """

    block_size: int = 32
    short_lags: tuple[int, ...] = (0, 1, 2, 3, 4)
    kappa: float = 0.1
    long_lags: tuple[int, int] = (500, 5000)
    long_min_entries: int = 1000
    kappa_long: float = 1e-3
    long_min_frac: float = 2 / 3
    skip: int = slash.SKIP
    sink_eps: float = sinks.SINK_EPS
    map_size: int = 64
    counterfactual_sinks: bool = True
    tau: float = 0.95
    variants: tuple[RopeVariant, ...] = ()
    inp: bool = False
    geometry: bool = False
    cluster_points: int = 1000

    def __post_init__(self):
        if not 0 < self.long_min_frac <= 1:
            raise ConfigError(f"long_min_frac must lie in (0, 1], got {self.long_min_frac:g} (e.g. 2/3: a long lag must hold in 2 of 3 prompts)")
        if self.block_size < 1:
            raise ConfigError(f"block_size must be >= 1, got {self.block_size}")
        self.variants = tuple(v if isinstance(v, RopeVariant) else variant_from_dict(v) for v in self.variants)
        names = [v.name for v in self.variants]
        if len(set(names)) != len(names):
            raise ConfigError(f"counterfactual variants need unique names, got {names}")

    def to_dict(self) -> dict:
        """JSON-ready settings (variants as ``{"type": ..., fields...}``)."""
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["variants"] = [variant_to_dict(v) for v in self.variants]
        return d

    def variant_index(self, name: str) -> int:
        """Position of a counterfactual variant in the state's ``variant`` axis.

        Raises:
            KeyError: no variant of that name was scanned (the message lists those that were).
        """
        names = [v.name for v in self.variants]
        if name not in names:
            raise KeyError(f"no counterfactual variant {name!r} in this scan; it has {names or 'none'} (set ScanConfig.variants)")
        return names.index(name)


# --------------------------------------------------------------------------------------------
# Collector: per-layer reductions of one prompt into State
# --------------------------------------------------------------------------------------------


def new_state(card: ModelCard, n_pos: int, cfg: ScanConfig) -> State:
    """Zeroed sums for a model; lag-indexed entries have length ``n_pos``."""
    L, H, K, D = card.n_layers, card.n_heads, card.n_kv_heads, card.d_head
    z = lambda *s: torch.zeros(*s, dtype=torch.float64)  # noqa: E731
    return State(
        prompts=z(1),
        slash_mean_sum=z(L, H, n_pos),
        slash_prompts=z(n_pos),
        slash_sq_sum=z(L, H, n_pos), long_hits=z(L, H, n_pos), long_hit_score=z(L, H, n_pos), long_hit_prompt=z(L, H, n_pos),
        gram_q_pre=z(L, H, D, D), gram_q_rot=z(L, H, D, D),
        gram_k_pre=z(L, K, D, D), gram_k_rot=z(L, K, D, D),
        norm_q=z(L, 3, H), norm_k=z(L, 3, K),
        key0_norm=z(L, 2, K),
        sink_rope=z(L, H), sink_norope=z(L, H),
        cone_pre=z(L, 4, H), cone_rot=z(L, 4, H),
        map_sum=z(L, H, cfg.map_size, cfg.map_size),
        variant_slash_mean_sum=z(len(cfg.variants), L, H, n_pos), variant_sink=z(len(cfg.variants), L, H),
        inp_signed=z(L, H, D // 2), inp_abs=z(L, H, D // 2), inp_pairs=z(L, H),
        inp_query_map=z(L, H, cfg.map_size if cfg.inp else 0, D // 2),
        **(geometry.new_state(L, H, K, n_pos) if cfg.geometry else {}),
    )


def use_kernel(q: torch.Tensor) -> bool:
    """Whether the fused kernel handles this layer: float32 CPU tensors and the kernel built (see ``interp.kernels``)."""
    return q.device.type == "cpu" and q.dtype == torch.float32 and kernels.available()


class _Collector:
    """Receives each layer's q/k/v during one prompt's forward and adds its reductions to ``state``."""

    def __init__(self, card: ModelCard, cfg: ScanConfig, state: State, specs: list[RopeSpec] | None = None):
        self.card, self.cfg, self.state = card, cfg, state
        self.specs = specs  # per-layer RoPE, needed by the counterfactual variants
        if cfg.variants and specs is None:
            raise ValueError("counterfactual variants need the model's per-layer RoPE specs")
        self.tokens: torch.Tensor | None = None  # the prompt being scanned (token-aware variants read it)
        self.engine = "none"  # which attention path ran last: "fused-cpu" or "python"
        self.prompt_id = 0  # global index of the prompt being scanned (recorded with long-range hits)

    def __call__(self, call: AttentionCall) -> torch.Tensor:
        """The tap handler (``interp.taps``): one layer of one prompt -> its attention output ``[pos, head, d_head]``.

        Works in float32 whatever the model's dtype (bf16/fp16 q/k/v are upcast; the output is cast back by the tap).
        """
        if not (torch.isfinite(call.query).all() and torch.isfinite(call.key).all()):
            raise NumericsError(f"{self.card.name}: layer {call.layer} produced non-finite queries or keys in {call.query.dtype} "
                                f"(overflow); scan in bfloat16 or float32 (--dtype)")
        q_pre, k_pre = call.pre()
        f32 = lambda t: t.float()  # noqa: E731
        return self.attend(call.layer, f32(call.query), f32(call.key), f32(call.value), call.scale, call.window, call.softcap,
                           q_pre, k_pre)

    def attend(self, layer, q_rot, k_rot, v, scale, window, softcap, q_pre, k_pre):
        """One layer of one prompt: q/k/v ``[pos, head|kv_head, d_head]`` -> attention output ``[pos, head, d_head]``.

        Uses the fused kernel (``interp.kernels``) for float32 CPU tensors when it is available, else
        the Python block path; both compute the same exact probabilities.
        """
        cfg, st = self.cfg, self.state
        N = q_rot.shape[0]
        out, lag, sink, amap, sink_pre, inp = self._attention(q_rot, k_rot, v, scale, window, softcap,
                                                              (q_pre, k_pre) if cfg.counterfactual_sinks else None, cfg.inp)
        st.add("map_sum", layer, amap)
        if inp is not None:
            M = min(cfg.map_size, N)
            st.add("inp_query_map", (layer, slice(None), slice(0, M)), freq.query_inp(q_rot, k_rot, M - 1, M, self.card.pairing))
            st.add("inp_signed", layer, inp["signed"])
            st.add("inp_abs", layer, inp["abs"])
            st.add("inp_pairs", layer, inp["count"])
        part = slash.prompt_slash(lag, N, cfg.skip, cfg.kappa_long, self.prompt_id)
        for name in ("slash_mean_sum", "slash_sq_sum", "long_hits", "long_hit_score", "long_hit_prompt"):
            st.add(name, (layer, slice(None), slice(0, N)), part[name])
        if layer == 0:
            st.add("slash_prompts", slice(0, N), part["slash_prompts"])
            st.add("prompts", 0, torch.ones(()))
        st.add("sink_rope", layer, sink.double().mean(-1))
        if sink_pre is not None:
            st.add("sink_norope", layer, sink_pre.double().mean(-1))
        self._token_stats(layer, q_pre, k_pre, q_rot, k_rot)
        self._variants(layer, q_pre, k_pre, scale, window, softcap)
        if cfg.geometry:
            for name, value in geometry.prompt_sums(q_pre, k_pre, q_rot, k_rot, window, cfg.cluster_points,
                                                    self.prompt_id * 1009 + layer).items():
                st.add(name, (layer, slice(None), slice(0, N)) if name in geometry.PER_POSITION else layer, value)
        return out

    def _attention(self, q, k, v, scale, window, softcap, pre, inp=False):
        """Exact attention of one layer and its reductions, on the fused kernel when it applies, else in Python.

        Returns ``(out [pos, head, d_head] (empty when v is None), lag [head, pos], sink [head, pos], map [head, M, M],
        sink_pre [head, pos] or None, inp)``; ``pre = (q_pre, k_pre)`` adds the pre-RoPE counterfactual weight on key 0;
        with ``inp``, ``inp`` is ``interp.stats.freq.inp_sums``' dict (signed / abs ``[head, freq]``, count ``[head]``), else None.
        """
        cfg, pairing = self.cfg, self.card.pairing
        if use_kernel(q):
            self.engine = "fused-cpu"
            out, lag, sink, amap, sink_pre, inp_s, inp_a = kernels.stream_layer(
                q, k, v, scale, window, softcap, cfg.block_size, cfg.skip, cfg.map_size, *(pre or (None, None)),
                inp_pairing=pairing if inp else None)
            sums = None
            if inp:
                n = freq.pair_count(q.shape[0], cfg.skip, window)
                sums = {"signed": inp_s, "abs": inp_a, "count": torch.full((q.shape[1],), float(n), dtype=torch.float64)}
            return out, lag, sink, amap, sink_pre if pre is not None else None, sums
        self.engine = "python"
        out, lag, sink, amap = self._blocks(q, k, v, scale, window, softcap)
        sink_pre = key_weight(*pre, scale, window, softcap, cfg.block_size, key=0) if pre is not None else None
        sums = freq.inp_sums(q, k, pairing, cfg.skip, window, cfg.block_size) if inp else None
        return out, lag, sink, amap, sink_pre, sums

    def _variants(self, layer, q_pre, k_pre, scale, window, softcap):
        """Counterfactual passes: attention with each variant's rotation of the pre-RoPE q/k (no P @ V)."""
        if not self.cfg.variants:
            return
        N = q_pre.shape[0]
        pos = torch.arange(N, device=q_pre.device)
        spec = self.specs[layer]
        for i, var in enumerate(self.cfg.variants):
            q = rotate_variant(q_pre, pos, spec, var, self.tokens)
            k = rotate_variant(k_pre, pos, spec, var, self.tokens)
            _, lag, sink, _, _, _ = self._attention(q, k, None, scale * var.logit_scale(N), window, softcap, None)
            part = slash.prompt_slash(lag, N, self.cfg.skip)
            self.state.add("variant_slash_mean_sum", (i, layer, slice(None), slice(0, N)), part["slash_mean_sum"])
            self.state.add("variant_sink", (i, layer), sink.double().mean(-1))

    def _blocks(self, q_rot, k_rot, v, scale, window, softcap):
        """Python block path: ``(out [pos, head, d_head] (empty without v), lag [head, pos], sink [head, pos], map [head, M, M])``."""
        cfg, H, M = self.cfg, self.card.n_heads, self.cfg.map_size
        N = q_rot.shape[0]
        out = torch.empty_like(q_rot) if v is not None else q_rot.new_empty(0, H, q_rot.shape[-1])
        # float32 within one prompt (at most pos / block_size additions per entry), float64 across prompts
        lag = torch.zeros(H, N, dtype=q_rot.dtype, device=q_rot.device)
        sink = torch.zeros(H, N, dtype=q_rot.dtype, device=q_rot.device)
        amap = torch.zeros(H, M, M, dtype=torch.float64, device=q_rot.device)
        for blk in attention_blocks(q_rot, k_rot, scale, window, softcap, cfg.block_size, v=v, out=out if v is not None else None):
            sink[:, blk.i0 : blk.i1] = blk.key_column(0)
            m = maps.block_map(blk, M)
            if m is not None:
                amap += m
            skip = min(cfg.skip, blk.i1)
            blk.probs_rev[:, :, blk.i1 - skip :] = 0.0  # drop keys 0..skip-1 from slash sums
            lag[:, : blk.i1] += lag_sums(blk.probs_rev)
        return out, lag, sink, amap

    def _token_stats(self, layer, q_pre, k_pre, q_rot, k_rot):
        st = self.state
        st.add("gram_q_pre", layer, spectrum.gram(q_pre))
        st.add("gram_q_rot", layer, spectrum.gram(q_rot))
        st.add("gram_k_pre", layer, spectrum.gram(k_pre))
        st.add("gram_k_rot", layer, spectrum.gram(k_rot))
        st.add("norm_q", layer, norms.norm_sums(q_pre))
        st.add("norm_k", layer, norms.norm_sums(k_pre))
        st.add("key0_norm", layer, norms.first_key_norm(k_pre))
        st.add("cone_pre", layer, cone.cone_values(q_pre, k_pre))
        st.add("cone_rot", layer, cone.cone_values(q_rot, k_rot))


# --------------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------------


@dataclass
class ScanResult:
    """Raw sums of a scan plus finalised tables.

    Attributes:
        card: the model card.
        config: the ScanConfig used.
        state: additive sums (merge results with ``merge_results`` or ``a.state + b.state``).
        meta: corpus, prompt count, tokens, timings.
    """

    card: ModelCard
    config: ScanConfig
    state: State
    meta: dict = field(default_factory=dict)

    @property
    def scores(self) -> torch.Tensor:
        """``[layer, head, delta]`` average slash score at every lag (NaN where undefined)."""
        return slash.slash_scores(self.state)

    def variant_scores(self, name: str) -> torch.Tensor:
        """``[layer, head, delta]`` average slash score under the counterfactual variant ``name`` (NaN where undefined).

        Raises:
            KeyError: the scan has no variant of that name.
        """
        i = self.config.variant_index(name)
        n = self.state["slash_prompts"]
        return self.state["variant_slash_mean_sum"][i] / torch.where(n > 0, n, torch.nan)

    def inp_query_map(self) -> torch.Tensor:
        """``[layer, head, k_pos, freq]`` InP(i, j, l) of query ``i = map_size - 1`` with keys ``j = 0..map_size-1``, mean over
        prompts (paper 004 Fig. 7 shows one prompt's; keys include the sink). Needs ``ScanConfig(inp=True)``.

        Raises:
            ValueError: the scan ran without InP.
        """
        if not self.config.inp:
            raise ValueError("this scan has no InP sums: scan with ScanConfig(inp=True) (interp ablate does)")
        return self.state["inp_query_map"] / self.state["prompts"][0]

    def long_lag_range(self) -> range:
        """Long lags that fit the scanned prompts with ``long_min_entries`` entries each (may be empty)."""
        lo, hi = self.config.long_lags
        n = self.state["slash_prompts"].shape[-1]  # lags scanned (the longest prompt)
        return range(lo, max(lo, min(hi, n - self.config.skip - self.config.long_min_entries) + 1))

    @property
    def heads(self) -> pd.DataFrame:
        """One row per (layer, head): every per-head measurement (see ``interp.stats``)."""
        return head_table(self)

    def slash_table(self, lags: Iterable[int] | None = None) -> pd.DataFrame:
        """Tidy ``(layer, head, delta, slash_score)``; default lags: the short lags."""
        return slash.lag_table(self.scores, list(lags) if lags is not None else list(self.config.short_lags))

    def maps(self) -> torch.Tensor:
        """``[layer, head, M, M]`` average attention over the first M positions (mean over prompts)."""
        return self.state["map_sum"] / self.state["prompts"][0]

    def save(self, directory: str | Path) -> Path:
        """Write ``state.pt`` and ``scan.json`` (card, config, meta) into ``directory``."""
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        self.state.save(d / "state.pt")
        (d / "scan.json").write_text(json.dumps({"card": self.card.to_dict(), "config": self.config.to_dict(), "meta": self.meta}, indent=1))
        return d

    @classmethod
    def load(cls, directory: str | Path) -> "ScanResult":
        """Read a result written by ``save`` (a shard or a merged scan).

        Raises:
            FileNotFoundError: ``directory`` lacks ``state.pt`` or ``scan.json``.
            CorruptStateError: either file cannot be read, or holds something other than a scan's state.
        """
        d = Path(directory)
        if not (d / "state.pt").exists() or not (d / "scan.json").exists():
            raise FileNotFoundError(f"{d} is not a scan output: it needs state.pt and scan.json (write one with interp scan --out)")
        fix = f"re-run the scan into {d.parent} (interp scan MODEL --out DIR) or restore the file"
        try:
            info = json.loads((d / "scan.json").read_text())
            cfg = info["config"]
            cfg["short_lags"], cfg["long_lags"] = tuple(cfg["short_lags"]), tuple(cfg["long_lags"])
            card, config, meta = ModelCard(**info["card"]), ScanConfig(**cfg), info["meta"]
        except (ValueError, KeyError, TypeError) as err:
            raise CorruptStateError(f"{d / 'scan.json'} is not a scan's settings ({type(err).__name__}: {err}); {fix}") from None
        try:
            state = State.load(d / "state.pt")
        except Exception as err:  # torch raises many types for a damaged or foreign file (zip, pickle, EOF, runtime)
            raise CorruptStateError(f"{d / 'state.pt'} cannot be read ({type(err).__name__}); it is damaged or not a scan's "
                                    f"state; {fix}") from None
        expected = new_state(card, 1, config)
        bad = [k for k, v in expected.items() if k not in state or not isinstance(state[k], torch.Tensor)
               or state[k].shape[:-1] != v.shape[:-1] and k not in ("prompts",)]
        if bad:
            raise CorruptStateError(f"{d / 'state.pt'} is not the state of a scan of {card.name} with these settings "
                                    f"(missing or misshapen: {', '.join(bad[:4])}); {fix}")
        return cls(card, config, state, meta)


def scan(
    model: LoadedModel,
    prompts: Sequence[torch.Tensor] | torch.Tensor,
    config: ScanConfig | None = None,
    *,
    progress: bool = False,
    meta: dict | None = None,
    prompt_ids: Sequence[int] | None = None,
    beyond_context: bool = False,
) -> ScanResult:
    """Run every prompt once and accumulate all per-head measurements.

    Args:
        model: a loaded model.
        prompts: ``[prompt, pos]`` tensor or a list of ``[pos]`` token tensors (lengths may differ).
        config: settings; default ``ScanConfig()``.
        progress: show a tqdm progress bar (one step per prompt).
        meta: extra entries for ``ScanResult.meta`` (corpus name, seed...).
        prompt_ids: global index of each prompt (default ``0..len-1``; shards pass their indices in the
            whole corpus so that merged results name the prompt of a content repeat).
        beyond_context: allow prompts longer than the model's context (out-of-distribution positions).

    Returns:
        ScanResult; ``.heads`` is the per-head table.

    Raises:
        PromptError / ShapeError: a prompt is empty, has bad ids, or exceeds the context.
    """
    from tqdm.auto import tqdm

    cfg = config or ScanConfig()
    toks = [as_tokens(model, p, beyond_context=beyond_context) for p in prompts]
    n_max = max(t.numel() for t in toks)
    state = new_state(model.card, n_max, cfg)
    collector = _Collector(model.card, cfg, state, rope_specs(model.hf) if cfg.variants else None)
    if torch.device(model.device).type == "cpu":
        kernels.available()  # the one-time build (~20 s) happens here, outside the timing in meta["seconds"]
    t0 = time.perf_counter()
    with torch.inference_mode(), attention_taps(model, collector):
        desc = f"scan {model.card.name}" + (f" ({meta['corpus']})" if meta and "corpus" in meta else "")
        ids = list(prompt_ids) if prompt_ids is not None else list(range(len(toks)))
        if len(ids) != len(toks):
            raise ValueError(f"prompt_ids has {len(ids)} entries for {len(toks)} prompts")
        for pid, t in zip(ids, tqdm(toks, desc=desc, unit="prompt", disable=not progress)):
            collector.prompt_id, collector.tokens = pid, t
            # the decoder stack only: the scan reads attention, so the LM head (N x vocab logits) is skipped
            model.hf.base_model(t[None].to(model.device), use_cache=False)
    info = {"prompts": len(toks), "tokens": [int(t.numel()) for t in toks], "seconds": time.perf_counter() - t0,
            "engine": collector.engine, "prompt_ids": [int(i) for i in ids],
            "inv_freq": [spec.inv_freq.tolist() for spec in rope_specs(model.hf)],
            "sample_tokens": [model.tokenizer.decode([int(i)]) for i in toks[0][: cfg.map_size]]}
    return ScanResult(model.card, cfg, state, {**info, **(meta or {})})


def merge_results(results: Sequence[ScanResult]) -> ScanResult:
    """Combine scans of the same model and settings (e.g. shards) by adding their sums.

    The merged ``meta["shards"]`` lists the inputs' shard ids and ``meta["prompt_ids"]`` every prompt id once.

    Raises:
        ValueError: empty input, results from different models or settings, or a prompt id in two inputs
            (a shard given twice would be counted twice).
    """
    if not results:
        raise ValueError("merge_results needs at least one result")
    first = results[0]
    for r in results[1:]:
        if r.card.name != first.card.name or r.config.to_dict() != first.config.to_dict():
            raise ValueError(f"cannot merge scans of {first.card.name} and {r.card.name} or with different settings")
    seen: dict[int, int] = {}
    for k, r in enumerate(results):
        for pid in r.meta.get("prompt_ids", []):
            if pid in seen:
                raise ValueError(f"prompt {pid} is in inputs {seen[pid]} and {k} (shards {results[seen[pid]].meta.get('shards', '?')} and "
                                 f"{r.meta.get('shards', '?')}): merging would count it twice; give each shard once")
            seen[pid] = k
    state = first.state
    for r in results[1:]:
        state = state + r.state
    meta = {"prompts": sum(r.meta.get("prompts", 0) for r in results),
            "tokens": [n for r in results for n in r.meta.get("tokens", [])],
            "prompt_ids": [i for r in results for i in r.meta.get("prompt_ids", [])],
            "shards": [s for r in results for s in _shard_ids(r)],
            "merged_from": len(results)}
    meta.update({k: v for k, v in first.meta.items() if k not in meta and k not in ("seconds", "shard", "worker_pid")})
    return ScanResult(first.card, first.config, state, meta)


def _shard_ids(result: ScanResult) -> list[str]:
    """The shard ids a result holds (a merged result lists its inputs'; a scan has one, ``meta["shard"]``)."""
    if "shards" in result.meta:
        return list(result.meta["shards"])
    return [result.meta["shard"]] if "shard" in result.meta else []


def head_table(result: ScanResult) -> pd.DataFrame:
    """Finalise sums into one row per (layer, head). Columns:

    ``layer, head, kv_head``; ``slash_d0..`` (average slash score per short lag), ``slash_score``,
    ``slash_delta``, ``is_sdh`` (short range, kappa); ``long_slash_score``, ``long_slash_delta``,
    ``long_slash_prompt_frac``, ``is_sdh_long`` (long range, kappa_long, lags that hold in at least
    ``long_min_frac`` of the prompts; NaN if prompts are too short or no lag is consistent) and
    ``long_any_slash_score``, ``long_any_slash_delta``, ``long_any_prompt_frac`` (best long lag of the mean
    score without the consistency rule; see ``interp.stats.slash.consistent_long_columns``); ``r1_q``, ``R95_q``,
    ``r1_k``, ``R95_k`` (pre-RoPE); ``srank_q_pre``, ``srank_q_rot``, ``srank_k_pre``, ``srank_k_rot``;
    ``fsv_ratio_q``, ``fsv_ratio_k``, ``fsv_lemma1_q``, ``fsv_lemma1_k``; ``norm_rv_q``, ``norm_rv_k``;
    ``key0_norm_ratio``; ``sink_weight``, ``sink_weight_norope``, ``has_sink``; ``cos_qq_pre``,
    ``cos_kk_pre``, ``cos_qk_pre``, ``qk_angle_pre``, and the same ``_rot`` (post-RoPE); with ``config.inp``
    the per-plane columns of ``inp_columns``.
    """
    st, card, cfg = result.state, result.card, result.config
    L, H, g = card.n_layers, card.n_heads, card.group_size
    P = st["prompts"][0]
    kv = torch.arange(H) // g
    scores = slash.slash_scores(st)
    cols: dict[str, torch.Tensor] = {
        "layer": torch.arange(L)[:, None].expand(L, H),
        "head": torch.arange(H)[None, :].expand(L, H),
        "kv_head": kv[None, :].expand(L, H),
    }
    n = scores.shape[-1]
    for d in cfg.short_lags:
        cols[f"slash_d{d}"] = scores[..., d] if d < n else torch.full((L, H), torch.nan)
    short = range(min(cfg.short_lags), max(cfg.short_lags) + 1)
    cols.update(slash.sdh_columns(scores, short, cfg.kappa, "slash_", "is_sdh"))
    cols.update(slash.consistent_long_columns(st, result.long_lag_range(), cfg.kappa_long, cfg.long_min_frac))
    for name, key, expand in (("q", "q", False), ("k", "k", True)):
        pre = spectrum.spectrum_metrics(st[f"gram_{key}_pre"], cfg.tau)
        rot = spectrum.spectrum_metrics(st[f"gram_{key}_rot"], cfg.tau)
        pred = spectrum.fsv_prediction(st[f"gram_{key}_pre"], card.pairing)
        e = (lambda t: t[:, kv]) if expand else (lambda t: t)
        cols[f"r1_{name}"] = e(pre["r1"])
        cols[f"R95_{name}"] = e(pre["R"])
        cols[f"srank_{name}_pre"] = e(pre["srank"])
        cols[f"srank_{name}_rot"] = e(rot["srank"])
        cols[f"fsv_ratio_{name}"] = e(rot["spec_norm"] / pre["spec_norm"])
        cols[f"fsv_lemma1_{name}"] = e(pred)
    cols["norm_rv_q"] = norms.relative_variation(st["norm_q"])
    cols["norm_rv_k"] = norms.relative_variation(st["norm_k"])[:, kv]
    k0 = st["key0_norm"] / P
    cols["key0_norm_ratio"] = (k0[:, 0] / k0[:, 1])[:, kv]
    cols["sink_weight"] = st["sink_rope"] / P
    cols["sink_weight_norope"] = st["sink_norope"] / P if cfg.counterfactual_sinks else torch.full((L, H), torch.nan)
    cols["has_sink"] = sinks.sink_flag(cols["sink_weight"], cfg.sink_eps)
    if cfg.inp:
        cols.update(inp_columns(st))
    if cfg.geometry:
        cols.update(geometry.columns(st, result.meta["tokens"], kv))
    for tag in ("pre", "rot"):
        c = st[f"cone_{tag}"] / P
        for i, name in enumerate(("cos_qq", "cos_kk", "cos_qk", "qk_angle")):
            cols[f"{name}_{tag}"] = c[:, i]
    df = pd.DataFrame({k: v.reshape(-1).cpu().numpy() for k, v in cols.items()})
    df.attrs["model"] = card.name
    for c in ("layer", "head", "kv_head"):
        df[c] = df[c].astype(int)
    return df


def inp_columns(state: State) -> dict[str, torch.Tensor]:
    """Per-head summaries of the InP spectrum (paper 004 Sec. 4, App. D; ``interp.stats.freq``), ``[layer, head]`` each.

    ``inp_active_abs`` / ``inp_active_signed``: number of active planes (mean |InP| or signed mean >= 0.1 x its
    maximum over planes); ``inp_top_plane``: plane with the largest mean |InP| (0 = highest frequency);
    ``inp_active_high``, ``inp_active_medium``, ``inp_active_low``: active planes (by |InP|) in each band
    (``numpy.array_split`` thirds, as the band ablation).
    """
    mean_s, mean_a = freq.inp_means({"signed": state["inp_signed"], "abs": state["inp_abs"], "count": state["inp_pairs"]})
    act_a, act_s = freq.active_planes(mean_a), freq.active_planes(mean_s)
    out = {"inp_active_abs": act_a.sum(-1).double(), "inp_active_signed": act_s.sum(-1).double(),
           "inp_top_plane": mean_a.nan_to_num(nan=-1.0).argmax(-1).double()}
    for band, idx in zip(("high", "medium", "low"), np.array_split(np.arange(mean_a.shape[-1]), 3)):
        out[f"inp_active_{band}"] = act_a[..., torch.as_tensor(idx)].sum(-1).double()
    return out


def layer_inv_freq(result: ScanResult) -> torch.Tensor:
    """``[layer, freq]`` RoPE frequencies (radians per position) the scanned model used (recorded in ``meta``), or the
    default RoPE of the card's per-layer base for scans that did not record them."""
    if "inv_freq" in result.meta:
        return torch.tensor(result.meta["inv_freq"], dtype=torch.float64)
    c = result.card
    return torch.stack([default_inv_freq(t, c.d_head).double() for t in c.rope_theta])


def inp_spectrum(result: ScanResult) -> pd.DataFrame:
    """Tidy per-plane InP table: ``layer, head, freq, period`` (positions per turn), ``mean_inp`` (signed),
    ``mean_abs_inp``, ``active_abs``, ``active_signed`` (004 eq. 8-9, Sec. 4). One row per (layer, head, freq).

    Raises:
        ValueError: the scan ran without ``ScanConfig(inp=True)``.
    """
    if not result.config.inp:
        raise ValueError("this scan has no InP sums: scan with ScanConfig(inp=True) (interp ablate does)")
    st = result.state
    mean_s, mean_a = freq.inp_means({"signed": st["inp_signed"], "abs": st["inp_abs"], "count": st["inp_pairs"]})
    L, H, F = mean_a.shape
    periods = freq.period(layer_inv_freq(result))  # [layer, freq]
    idx = pd.MultiIndex.from_product([range(L), range(H), range(F)], names=["layer", "head", "freq"])
    return pd.DataFrame({
        "period": periods[:, None, :].expand(L, H, F).reshape(-1).numpy(),
        "mean_inp": mean_s.reshape(-1).numpy(), "mean_abs_inp": mean_a.reshape(-1).numpy(),
        "active_abs": freq.active_planes(mean_a).reshape(-1).numpy(), "active_signed": freq.active_planes(mean_s).reshape(-1).numpy(),
    }, index=idx).reset_index()


def add_ood(heads: pd.DataFrame, ood: ScanResult) -> pd.DataFrame:
    """Add ``ood_slash_score`` (random-token score at each head's ``slash_delta``),
    ``ood_ratio`` = OOD score / text score (paper 004, Sec. 3.1, Fig. 3b and Table 3), and
    ``long_ood_slash_score`` (random-token score at ``long_slash_delta``; 004 Table 6; NaN where the head
    has no consistent long lag or the OOD prompts are shorter).

    Raises:
        ValueError: the OOD scan is of another model.
    """
    if ood.card.name != heads.attrs.get("model", ood.card.name) or ood.card.n_heads != heads["head"].max() + 1:
        raise ValueError("the OOD scan must be of the same model as the head table")
    scores = ood.scores.numpy()
    d = heads["slash_delta"].fillna(0).to_numpy().astype(int)
    val = scores[heads["layer"].to_numpy(), heads["head"].to_numpy(), d]
    out = heads.copy()
    out["ood_slash_score"] = val
    out["ood_ratio"] = val / out["slash_score"]
    if "long_slash_delta" in out:  # random-token score at each head's consistent long lag (004 Table 6)
        dl = out["long_slash_delta"].to_numpy()
        ok = ~np.isnan(dl) & (np.nan_to_num(dl, nan=0) < scores.shape[-1])
        idx = np.where(ok, np.nan_to_num(dl, nan=0), 0).astype(int)
        out["long_ood_slash_score"] = np.where(ok, scores[heads["layer"].to_numpy(), heads["head"].to_numpy(), idx], np.nan)
    return out
