"""Massive values (Jin et al., ICML 2025): where the massive q/k channels sit, and what destroying them does.

- ``massive_channels(result)``: the massive post-RoPE channels of q (per head) and k (per kv head) of a scan that ran
  the ``massive`` measure, by Jin et al.'s rule ``M[h,d] > lambda * mean_d M[h,d]`` (``interp.measures.massive``).
- ``random_channels(mask, seed)``: the control: per head as many channels, drawn uniformly from its non-massive ones.
- ``destruction(model, prompts, ...)``: Jin et al.'s "destruction" run causally
  (``interp.hooks.intervene.massive_intervention``) in chosen layers: the mean next-token NLL (nats per token) with
  and without it, and the change of every per-head score of the head table (a scan of the intervened model on the
  same prompts), for the massive channels and for the random control.

The massive channels are found on the prompts the NLL is measured on (Jin et al. find them per forward, with a fixed
top-k). Sits above the scan: it calls ``scan`` and reads ``ScanResult``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Iterable, Sequence

import numpy as np
import pandas as pd
import torch

from interp.engine import ScanConfig, ScanResult, scan
from interp.hooks.intervene import massive_intervention, mean_nll
from interp.measures.massive import channel_means, channel_norms, massive_mask
from interp.models import LoadedModel

ID_COLUMNS = ("layer", "head", "kv_head")


def massive_channels(result: ScanResult, lam: float | None = None) -> dict[str, torch.Tensor]:
    """``{"q": Bool[layer, head, d_head], "k": Bool[layer, kv_head, d_head]}``: Jin et al.'s massive post-RoPE channels.

    Args:
        result: a scan with ``ScanConfig(massive=True)``.
        lam: the threshold (default the scan's ``massive_lambda``).

    Raises:
        KeyError: the scan did not run the ``massive`` measure.
    """
    lam = float(result.config.massive_lambda if lam is None else lam)
    return {x: massive_mask(channel_norms(result, f"{x}_rot"), lam) for x in ("q", "k")}


def random_channels(mask: dict[str, torch.Tensor], seed: int = 0) -> dict[str, torch.Tensor]:
    """The control: for every (layer, head) as many channels as ``mask`` marks, drawn uniformly without replacement
    from the head's other channels (seeded; ``torch.Generator``). Same shapes and counts as ``mask``.

    Raises:
        ValueError: a head with more than half its channels marked (no disjoint draw of the same size exists).
    """
    g = torch.Generator().manual_seed(seed)
    out = {}
    for x, m in mask.items():
        r = torch.zeros_like(m)
        n = m.sum(-1)
        if bool((n > m.shape[-1] - n).any()):
            raise ValueError(f"{x}: a head has more than half its channels marked; no disjoint random control")
        for idx in torch.nonzero(n > 0).tolist():
            free = torch.nonzero(~m[tuple(idx)]).flatten()
            pick = free[torch.randperm(free.numel(), generator=g)[: int(n[tuple(idx)])]]
            r[tuple(idx)][pick] = True
        out[x] = r
    return out


def only_layers(mask: dict[str, torch.Tensor], layers: Iterable[int] | None) -> dict[str, torch.Tensor]:
    """``mask`` with every layer outside ``layers`` cleared (``None``: all kept)."""
    if layers is None:
        return mask
    keep = torch.zeros(next(iter(mask.values())).shape[0], dtype=torch.bool)
    keep[list(layers)] = True
    return {x: m & keep[:, None, None] for x, m in mask.items()}


def score_changes(base: pd.DataFrame, other: pd.DataFrame) -> pd.DataFrame:
    """Per numeric head-table column: mean over heads before and after, mean change and mean |change| (NaNs skipped)."""
    rows = []
    for c in base.columns:
        if c in ID_COLUMNS or c not in other or not pd.api.types.is_numeric_dtype(base[c]) or base[c].dtype == bool:
            continue
        a, b = base[c].to_numpy(float), other[c].to_numpy(float)
        d = b - a
        rows.append({"column": c, "before": np.nanmean(a) if np.isfinite(a).any() else np.nan,
                     "after": np.nanmean(b) if np.isfinite(b).any() else np.nan,
                     "mean_change": np.nanmean(d) if np.isfinite(d).any() else np.nan,
                     "mean_abs_change": np.nanmean(np.abs(d)) if np.isfinite(d).any() else np.nan})
    return pd.DataFrame(rows)


@dataclass
class Destruction:
    """What ``destruction`` measured.

    Attributes:
        base: the scan of the unmodified model (with the ``massive`` measure).
        channels: ``{"massive": mask, "random": mask}`` as passed to ``massive_intervention``.
        summary: one row per condition (``baseline``, ``massive``, ``random``): ``nll`` (nats per predicted token),
            ``delta_nll`` (minus the baseline's), ``q_channels``, ``k_channels`` (channels replaced, summed over layers
            and heads), ``layers`` (the layers edited), ``seconds``.
        scores: one row per condition and head-table column (``score_changes``).
        heads: ``{condition: head table}``.
    """

    base: ScanResult
    channels: dict
    summary: pd.DataFrame
    scores: pd.DataFrame
    heads: dict = field(default_factory=dict)


def destruction(model: LoadedModel, prompts: Sequence[torch.Tensor], *, layers: Iterable[int] | None = None,
                lam: float = 5.0, seed: int = 0, mean: str = "prompt", cfg: ScanConfig | None = None) -> Destruction:
    """Jin et al.'s destruction of the massive q/k channels in ``layers`` (default all), against as many random ones.

    Args:
        model: a loaded model; prompts: ``[pos]`` token tensors (e.g. ``interp.corpus.prompts(model, "pydoc", ...)``).
        layers: the layers whose channels are replaced.
        lam: Jin et al.'s threshold lambda.
        seed: the random control's draw.
        mean: ``"prompt"``: Jin et al.'s per-forward mean (one number per head); ``"fixed"``: each channel's own mean
            over the baseline scan (causal).
        cfg: the scan settings for the head tables (``massive`` is switched on; default ``ScanConfig()`` + massive).

    Raises:
        ValueError: an unknown ``mean``; see ``massive_intervention`` and ``random_channels``.
    """
    if mean not in ("prompt", "fixed"):
        raise ValueError(f"mean must be 'prompt' or 'fixed', got {mean!r}")
    cfg = replace(cfg if cfg is not None else ScanConfig(), massive=True, massive_lambda=float(lam))
    t0 = time.perf_counter()
    base = scan(model, prompts, cfg)
    nll0 = mean_nll(model, prompts)
    rows = [{"condition": "baseline", "nll": nll0, "delta_nll": 0.0, "q_channels": 0, "k_channels": 0,
             "seconds": time.perf_counter() - t0}]
    found = only_layers(massive_channels(base, lam), layers)
    chans = {"massive": found, "random": random_channels(found, seed)}
    values = {x: channel_means(base, x) for x in ("q", "k")} if mean == "fixed" else None
    heads = {"baseline": base.heads}
    tables = []
    for cond, mask in chans.items():
        t0 = time.perf_counter()
        with massive_intervention(model, mask, values, layers):
            nll = mean_nll(model, prompts)
            res = scan(model, prompts, cfg)
        heads[cond] = res.heads
        rows.append({"condition": cond, "nll": nll, "delta_nll": nll - nll0, "q_channels": int(mask["q"].sum()),
                     "k_channels": int(mask["k"].sum()), "seconds": time.perf_counter() - t0})
        tables.append(score_changes(base.heads, res.heads).assign(condition=cond))
    summary = pd.DataFrame(rows)
    summary["layers"] = "all" if layers is None else " ".join(map(str, sorted(set(layers))))
    summary["mean"] = mean
    return Destruction(base, chans, summary, pd.concat(tables, ignore_index=True), heads)
