"""Statistics shared by the experiments: percentile bootstrap intervals over prompts (or pairs).

Every interval of ``interp effects`` and ``interp patch`` comes from here, so resampling is the same everywhere:
``n`` resamples of the item indices drawn with replacement by ``numpy.random.default_rng(seed)``, one set of resamples
shared by every row of a table (rows stay comparable), percentiles ``(1 - level) / 2`` and ``(1 + level) / 2``
(Efron and Tibshirani 1993, ch. 13).
"""

from __future__ import annotations

import numpy as np


def resamples(n_items: int, n: int, seed: int = 0) -> np.ndarray:
    """``[n, n_items]`` int indices: ``n`` bootstrap resamples of ``n_items`` items (with replacement)."""
    return np.random.default_rng(seed).integers(0, n_items, size=(n, n_items))


def bootstrap_interval(values: np.ndarray, n: int, seed: int = 0, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Percentile bootstrap of the mean over items: ``values`` ``[row, item]`` -> ``(lo [row], hi [row])``.

    The same ``n`` resamples of the item indices serve every row. ``n = 0`` or one item: the interval is the point
    estimate.
    """
    v = np.asarray(values, dtype=np.float64)
    mean = v.mean(1)
    if n == 0 or v.shape[1] < 2:
        return mean.copy(), mean.copy()
    idx = resamples(v.shape[1], n, seed)
    boot = v[:, idx].mean(-1)  # [row, n]
    a = (1 - level) / 2
    return np.quantile(boot, a, axis=1), np.quantile(boot, 1 - a, axis=1)


def recovered(patched: np.ndarray, clean: np.ndarray, corrupt: np.ndarray) -> np.ndarray:
    """The share of the clean-corrupt gap a patch restores, from means over items (Wang et al. 2022; Heimersheim and
    Nanda 2024): ``(mean patched - mean corrupt) / (mean clean - mean corrupt)``.

    Args:
        patched: ``[row, item]`` metric with the patch; clean, corrupt: ``[item]`` metric of the two unpatched runs.

    Returns:
        ``[row]`` float64; NaN where the gap is 0.
    """
    p = np.asarray(patched, dtype=np.float64)
    gap = float(np.mean(clean) - np.mean(corrupt))
    with np.errstate(invalid="ignore", divide="ignore"):
        return (p.mean(-1) - np.mean(corrupt)) / gap if gap != 0 else np.full(p.shape[:-1], np.nan)


def recovered_interval(patched: np.ndarray, clean: np.ndarray, corrupt: np.ndarray, n: int, seed: int = 0,
                       level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Percentile bootstrap of ``recovered`` over items: each resample draws items (pairs) with replacement and
    recomputes the ratio of means from the same items for the patched, clean and corrupt runs.

    Args:
        patched: ``[row, item]``; clean, corrupt: ``[item]``; n: resamples (0 or one item: the point estimate).

    Returns:
        ``(lo [row], hi [row])`` float64 (resamples with a zero gap are dropped; NaN if all are).
    """
    p = np.asarray(patched, dtype=np.float64)
    c, k = np.asarray(clean, dtype=np.float64), np.asarray(corrupt, dtype=np.float64)
    point = recovered(p, c, k)
    if n == 0 or p.shape[1] < 2:
        return point.copy(), point.copy()
    idx = resamples(p.shape[1], n, seed)
    pm, cm, km = p[:, idx].mean(-1), c[idx].mean(-1), k[idx].mean(-1)  # [row, n], [n], [n]
    gap = cm - km
    ok = gap != 0
    if not ok.any():
        nan = np.full(p.shape[0], np.nan)
        return nan, nan.copy()
    boot = (pm[:, ok] - km[ok]) / gap[ok]
    a = (1 - level) / 2
    return np.quantile(boot, a, axis=1), np.quantile(boot, 1 - a, axis=1)
