"""From head scores to a KV-cache budget: rank kv heads, stream the lowest-ranked share, export DuoAttention's files.

DuoAttention (Xiao et al. 2025, "DuoAttention: Efficient Long-Context LLM Inference with Retrieval and Streaming
Heads", Sec. 3; code ``mit-han-lab/duo-attention``) keeps a full KV cache for *retrieval* heads and only the first
``sink_size`` and the last ``recent_size`` tokens for *streaming* heads; its unit is the kv head (a GQA group shares
one cache). Its files, which its loader and NVIDIA kvpress's ``DuoAttentionPress`` read:

- ``full_attention_heads.tsv``: one row per layer, one tab-separated column per kv head, a score in [0, 1], high =
  keep the full cache (DuoAttention thresholds it at a sparsity quantile; kvpress at a ``head_compression_ratio``);
- ``config.json``: ``{"sink_size": S, "recent_size": W}``.

Orders (``ORDERS``; every score is per kv head, high = keep full): ``geometric`` (the ``kv_budget`` measure's predicted
distant mass, mean over the kv head's query heads), ``distant_mass`` (the ``shape`` measure's measured distant mass,
mean), ``kvpress`` (kvpress's on-the-fly score, already per kv head), ``effects`` (the loss change of streaming each
query head alone, ``interp effects --interventions streaming``, summed over the group: needs an effects table).

Exported score: the order's ranks mapped to [0, 1] so that the streamed share lies below 0.5 and the kept heads at
or above it (``split_scores``): a 0.5 threshold gives the chosen split, and a quantile of the scores gives the same
order as the raw score at any other share.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from interp.errors import ConfigError

ORDERS = ("geometric", "effects", "distant_mass", "kvpress")
_COLUMN = {"geometric": "geo_distant_mass", "distant_mass": "distant_mass", "kvpress": "kvpress_score"}


def kv_scores(heads: pd.DataFrame, card, order: str, effects: pd.DataFrame | None = None) -> np.ndarray:
    """``[layer, kv_head]`` float64 keep-score of every kv head under ``order`` (module docstring; high = keep full).

    Args:
        heads: a head table (``ScanResult.heads``) with ``layer``, ``head`` and the order's column (``geo_distant_mass``:
            ``kv_budget`` measure; ``distant_mass``: ``shape``; ``kvpress_score``: ``kv_budget``).
        card: the model card (``n_layers``, ``n_heads``, ``n_kv_heads``).
        order: one of ``ORDERS``; effects: for ``effects``, a table with ``layer, head, intervention, dnll`` (the
            ``streaming`` rows are read).

    Raises:
        ConfigError: unknown order, a missing column or effects table, or heads missing from the table.
    """
    if order not in ORDERS:
        raise ConfigError(f"unknown order {order!r}; use one of {', '.join(ORDERS)}")
    if order == "effects":
        if effects is None or "intervention" not in effects or not (effects["intervention"] == "streaming").any():
            raise ConfigError("order 'effects' needs the streaming rows of an effects table: run "
                              "`interp effects MODEL --interventions streaming` first and pass its heads.csv")
        t, col = effects[effects["intervention"] == "streaming"], "dnll"
    else:
        t, col = heads, _COLUMN[order]
        if col not in t:
            raise ConfigError(f"order {order!r} needs the column {col!r} (scan with --measure kv_budget,shape)")
    return per_kv_head(t, card, col, "sum" if order == "effects" else "mean", what=f"order {order!r}")


def per_kv_head(table: pd.DataFrame, card, column: str, how: str = "mean", what: str = "") -> np.ndarray:
    """``[layer, kv_head]`` float64: ``column`` of a per-query-head table (``layer``, ``head``) reduced over each kv head's
    query heads (``how``: ``mean`` or ``sum``).

    Raises:
        ConfigError: a head of the grid has no value.
    """
    L, H, K = card.n_layers, card.n_heads, card.n_kv_heads
    grid = np.full((L, H), np.nan)
    grid[table["layer"].to_numpy(int), table["head"].to_numpy(int)] = table[column].to_numpy(float)
    if np.isnan(grid).any():
        raise ConfigError(f"{what or column}: {int(np.isnan(grid).sum())} of {L * H} heads have no {column!r} value "
                          f"(prompts too short for a distant key, or a partial effects table)")
    per_kv = grid.reshape(L, K, H // K)
    return per_kv.sum(-1) if how == "sum" else per_kv.mean(-1)


def streamed(scores: np.ndarray, share: float) -> list[tuple[int, int]]:
    """The ``round(share * n)`` kv heads ``(layer, kv_head)`` of lowest score (ties: layer-major order), lowest first.

    Raises:
        ConfigError: ``share`` outside [0, 1].
    """
    if not 0.0 <= share <= 1.0:
        raise ConfigError(f"--streaming-share must lie in [0, 1], got {share}")
    flat = np.asarray(scores, dtype=float).ravel()
    n = int(round(share * flat.size))
    idx = np.argsort(flat, kind="stable")[:n]
    K = scores.shape[1]
    return [(int(i // K), int(i % K)) for i in idx]


def query_heads(kv_heads: Sequence[tuple[int, int]], card) -> list[tuple[int, int]]:
    """The query heads ``(layer, head)`` that read the given kv heads (head ``h`` reads kv head ``h // group``)."""
    g = card.n_heads // card.n_kv_heads
    return [(l, k * g + j) for l, k in kv_heads for j in range(g)]


def split_scores(scores: np.ndarray, share: float) -> np.ndarray:
    """``[layer, kv_head]`` scores in [0, 1] that keep ``scores``' order, with the ``streamed(scores, share)`` heads in
    [0, 0.5) and the others in [0.5, 1] (module docstring)."""
    flat = np.asarray(scores, dtype=float).ravel()
    n, m = flat.size, int(round(share * flat.size))
    rank = np.empty(n)
    rank[np.argsort(flat, kind="stable")] = np.arange(n)
    out = np.where(rank < m, 0.5 * rank / max(m, 1), 0.5 + 0.5 * (rank - m) / max(n - m - 1, 1))
    return out.reshape(scores.shape)


def kv_cache_saved(card, kv_heads: Sequence[tuple[int, int]], n_pos: int, sink: int, window: int) -> float:
    """Share of the KV cache (entries over every layer and kv head) saved at ``n_pos`` tokens when ``kv_heads`` keep only
    ``sink + window`` entries: a full head holds ``min(n_pos, sliding_window)`` (the model's own window, Gemma-3's local
    layers), a streamed one ``min(n_pos, sink + window, sliding_window)``."""
    full = np.array([min(n_pos, w or n_pos) for w in card.sliding_window], dtype=float)  # per layer
    total = full.sum() * card.n_kv_heads
    saved = sum(full[l] - min(full[l], sink + window) for l, _ in kv_heads)
    return float(saved / total)


def minference_patterns(heads: pd.DataFrame, n_pos: int) -> list[dict]:
    """Per query head, the MInference pattern (Jiang et al. 2024, ``minference_forward.py``: ``stream_llm`` = A-shape,
    ``vertical_and_slash``) that covers more of its attention at the budgets of ``interp.measures.shape.budgets(n_pos)``,
    from the ``shape`` measure's exact ``ashape_coverage`` and ``vs_coverage``: ``{layer, head, pattern, budget,
    coverage, minference}`` with ``minference`` = MInference's ``[pattern, v, s, score]`` entry (for ``stream_llm``:
    sink keys and local window)."""
    from interp.measures.shape import budgets

    b = budgets(n_pos)
    out = []
    for r in heads.itertuples():
        a, v = float(r.ashape_coverage), float(r.vs_coverage)
        pat, bud, cov = ("stream_llm", b["ashape"], a) if a >= v else ("vertical_and_slash", b["vs"], v)
        out.append({"layer": int(r.layer), "head": int(r.head), "pattern": pat, "budget": list(bud), "coverage": cov,
                    "ashape_coverage": a, "vs_coverage": v, "minference": [pat, int(bud[0]), int(bud[1]), cov]})
    return out


def write_split(out: Path, scores: np.ndarray, sink: int, window: int, patterns: list[dict] | None = None,
                meta: dict | None = None) -> list[Path]:
    """Write DuoAttention's ``full_attention_heads.tsv`` (``scores``, rows = layers, tab-separated kv heads, 6 decimals)
    and ``config.json`` (``sink_size``, ``recent_size``, plus ``meta``), and ``patterns.json`` when given.

    Raises:
        ConfigError: scores outside [0, 1] or not 2-D, ``sink < 0`` or ``window < 1``.
    """
    s = np.asarray(scores, dtype=float)
    if s.ndim != 2 or np.isnan(s).any() or s.min() < 0 or s.max() > 1:
        raise ConfigError("full_attention_heads.tsv needs a [layer, kv_head] score in [0, 1] for every kv head")
    if sink < 0 or window < 1:
        raise ConfigError(f"--sink must be >= 0 and --window >= 1 token, got {sink} and {window}")
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "full_attention_heads.tsv", out / "config.json"]
    np.savetxt(paths[0], s, delimiter="\t", fmt="%.6f")
    paths[1].write_text(json.dumps({"sink_size": int(sink), "recent_size": int(window), **(meta or {})}, indent=1) + "\n")
    if patterns is not None:
        paths.append(out / "patterns.json")
        paths[2].write_text(json.dumps(patterns, indent=1) + "\n")
    return paths
