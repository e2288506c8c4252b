"""Frequency ablations of paper 004 (Sec. 5, Table 5, Fig. 8): counterfactual (inside the scan) and causal.

- **Counterfactual band ablation.** The rotation planes (0 = highest frequency) are split into high /
  medium / low bands (``interp.rope.band_planes``: ``numpy.array_split``, six evenly spaced planes per
  band left unrotated, theta_l -> 0, channels kept). The scan recomputes every head's attention with
  each modified rotation from the captured pre-RoPE q/k (``ScanConfig.variants``; exact, block-wise,
  mergeable), and ``band_ablation_table`` reports the average slash score (004 Def. 3.1) at each head's
  own lag: ``original`` and one column per variant (``wo_high``, ``wo_medium``, ``wo_low``), and the
  ratios ablated / original (004 Fig. 8 plots these ratios for the SDHs).
- **Causal ablation.** The model itself runs with the variant (``interp.hooks.intervene.rope_intervention``) in
  chosen layers; ``causal_ablation`` reports the mean next-token NLL (nats) before and after and, per
  head, the change of the slash score at the head's original lag and of the sink weight downstream.

Sits above the scan: it calls ``scan`` and reads ``ScanResult``; it never touches the engine.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import pandas as pd

from interp.hooks.intervene import mean_nll, rope_intervention
from interp.models import LoadedModel
from interp.rope import PlaneAblation, RopeVariant, band_ablations
from interp.engine import ScanConfig, ScanResult, scan


def band_variants(n_freq: int, n_remove: int = 6, extra: dict[str, Sequence[int]] | None = None) -> tuple[RopeVariant, ...]:
    """The three band ablations (``wo_high``, ``wo_medium``, ``wo_low``) plus any named plane sets in ``extra``.

    Raises:
        ValueError: a plane outside ``0..n_freq-1`` in ``extra``.
    """
    out = list(band_ablations(n_freq, n_remove))
    for name, planes in (extra or {}).items():
        planes = tuple(int(p) for p in planes)
        if any(not 0 <= p < n_freq for p in planes):
            raise ValueError(f"planes of {name!r} must lie in 0..{n_freq - 1}, got {list(planes)}")
        out.append(PlaneAblation(name, planes))
    return tuple(out)


def band_ablation_table(result: ScanResult, heads: pd.DataFrame | None = None, all_heads: bool = False) -> pd.DataFrame:
    """Slash score at each head's own lag, original and under each counterfactual variant of the scan.

    Columns: ``layer, head, kv_head, delta`` (the head's best short lag, ``slash_delta``), ``original``
    (its average slash score), one column per variant (e.g. ``wo_high, wo_medium, wo_low``: scores at
    ``delta`` with that rotation), ``ratio_<variant>`` = ablated / original, and ``is_sdh``. One row per
    SDH (short range, ``is_sdh``), or per head with ``all_heads``. Source: 004 Table 5 and Fig. 8.

    Raises:
        ValueError: the scan ran without counterfactual variants.
    """
    if not result.config.variants:
        raise ValueError("this scan has no counterfactual variants: scan with ScanConfig(variants=band_variants(...)) or `interp ablate`")
    heads = result.heads if heads is None else heads
    rows = heads if all_heads else heads[heads["is_sdh"]]
    rows = rows[rows["slash_delta"].notna()]
    l, h = rows["layer"].to_numpy(), rows["head"].to_numpy()
    d = rows["slash_delta"].to_numpy().astype(int)
    out = pd.DataFrame({"layer": l, "head": h, "kv_head": rows["kv_head"].to_numpy(), "delta": d,
                        "original": rows["slash_score"].to_numpy()})
    for v in result.config.variants:
        out[v.name] = result.variant_scores(v.name).numpy()[l, h, d]
    for v in result.config.variants:
        out[f"ratio_{v.name}"] = out[v.name] / out["original"]
    out["is_sdh"] = rows["is_sdh"].to_numpy()
    return out.sort_values("original", ascending=False).reset_index(drop=True)


def ratio_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per variant: number of heads, median / mean / quartiles of ablated / original (the numbers behind 004 Fig. 8)."""
    cols = [c for c in table.columns if c.startswith("ratio_")]
    rows = []
    for c in cols:
        x = table[c].dropna().to_numpy()
        q = np.quantile(x, [0.25, 0.5, 0.75]) if x.size else [np.nan] * 3
        rows.append({"variant": c[len("ratio_"):], "heads": int(x.size), "mean": float(x.mean()) if x.size else np.nan,
                     "q25": q[0], "median": q[1], "q75": q[2]})
    return pd.DataFrame(rows)


@dataclass
class CausalAblation:
    """Result of ``causal_ablation``.

    Attributes:
        summary: one row per variant: ``band`` (variant name), ``layers`` ("all" or the list), ``nll_original``,
            ``nll``, ``delta_nll`` (nats per predicted token).
        heads: one row per (variant, layer, head): ``band, layer, head, delta`` (the head's original best short
            lag), ``slash_original``, ``slash``, ``delta_slash``, ``sink_original``, ``sink``, ``delta_sink``.
        baseline: the scan of the unmodified model.
        stopped: the exception of ``causal_ablation(stop_on=...)`` that stopped the run early (``summary`` and
            ``heads`` then hold the finished variants only), else None.
    """

    summary: pd.DataFrame
    heads: pd.DataFrame
    baseline: ScanResult
    stopped: BaseException | None = None


def causal_ablation(model: LoadedModel, prompts, variants: Iterable[RopeVariant], layers: Iterable[int] | None = None,
                    config: ScanConfig | None = None, *, progress: bool = False, baseline: ScanResult | None = None,
                    store: str | Path | None = None, stop_on: tuple[type[BaseException], ...] = (),
                    engine: str = "auto") -> CausalAblation:
    """Run the model with each variant in ``layers`` (default all) and measure NLL, slash scores and sinks.

    Per variant: one forward with the LM head per prompt for the NLL and one scan of the intervened model
    (the scan's heads then describe the model as it runs with the changed rotation). ``baseline`` reuses a
    scan of the same prompts without intervention (its config must have no variants' effect on the fields
    used here); otherwise one is run. The model is restored after every variant. With ``progress``, each
    variant's scan shows its tqdm bar, preceded by a line naming the variant and followed by one with its
    wall time (stderr).

    Args:
        store: a folder keeping each finished variant (``causal-band-KK.pkl``, K its index in ``variants``: its
            summary row and its per-head rows, written atomically and read back; ``interp.experiments.units``),
            from which finished variants are read back instead of run (``interp ablate --causal --resume``). The
            unmodified model's NLL is recomputed (one forward per prompt), so the tables equal an uninterrupted run's.
        stop_on: exception types (e.g. ``interp.cli.longrun.Interrupted``) that end the run early: the variant in
            flight is dropped (one stopped after its unit's rename counts) and ``stopped`` is set.
        engine: the scans' engine (``interp.engine.scan``; ``"python"`` is bit-for-bit repeatable, the fused CPU
            kernel's threads differ run to run at float rounding).

    Raises:
        InterpError: from the scan (bad prompts) or the intervention (a layer outside the model).
    """
    from interp.experiments.units import keep_units, read_pickle, write_pickle

    cfg = replace(config or ScanConfig(), variants=())
    layers = None if layers is None else sorted(set(layers))
    base = baseline if baseline is not None else scan(model, prompts, cfg, progress=progress, engine=engine)
    bh = base.heads
    nll0 = mean_nll(model, prompts)
    lidx, hidx = bh["layer"].to_numpy(), bh["head"].to_numpy()
    d = bh["slash_delta"].fillna(0).to_numpy().astype(int)
    variants = list(variants)
    names = [f"causal-band-{k:02d}.pkl" for k in range(len(variants))]
    by_name = dict(zip(names, enumerate(variants)))

    def compute(todo: list[str]):
        for name in todo:
            k, v = by_name[name]
            yield name, _causal_variant(model, prompts, v, k, len(variants), layers, cfg, progress, nll0, bh, (lidx, hidx, d),
                                             engine)

    got, stopped = keep_units(Path(store) if store is not None else None, names, compute, read_pickle, write_pickle,
                              stop_on=stop_on)
    summary = pd.DataFrame([g["summary"] for g in got.values()])
    per_head = [g["heads"] for g in got.values()]
    return CausalAblation(summary, pd.concat(per_head, ignore_index=True) if per_head else pd.DataFrame(), base, stopped)


def _causal_variant(model: LoadedModel, prompts, v: RopeVariant, k: int, n: int, layers: list[int] | None,
                    cfg: ScanConfig, progress: bool, nll0: float, bh: pd.DataFrame, at: tuple, engine: str) -> dict:
    """One variant of ``causal_ablation``: ``{"summary": its summary row, "heads": its per-head rows}``; ``at``: the
    ``(layer, head, lag)`` index arrays of ``bh``'s rows."""
    lidx, hidx, d = at
    t0 = time.perf_counter()
    if progress:
        print(f"causal ablation {v.name} ({k + 1} of {n}): next-token NLL, then a scan of the intervened model",
              file=sys.stderr, flush=True)
    with rope_intervention(model, v, layers):
        nll = mean_nll(model, prompts)
        res = scan(model, prompts, cfg, progress=progress, engine=engine)
    if progress:
        print(f"causal ablation {v.name}: done in {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    summary = {"band": v.name, "layers": "all" if layers is None else ",".join(map(str, layers)),
               "nll_original": nll0, "nll": nll, "delta_nll": nll - nll0}
    s = res.scores.numpy()[lidx, hidx, d]
    rh = res.heads
    heads = pd.DataFrame({
        "band": v.name, "layer": lidx, "head": hidx, "delta": d, "slash_original": bh["slash_score"].to_numpy(), "slash": s,
        "delta_slash": s - bh["slash_score"].to_numpy(), "sink_original": bh["sink_weight"].to_numpy(),
        "sink": rh["sink_weight"].to_numpy(), "delta_sink": rh["sink_weight"].to_numpy() - bh["sink_weight"].to_numpy()})
    return {"summary": summary, "heads": heads}
