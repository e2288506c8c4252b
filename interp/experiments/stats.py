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


def bh_adjust(p) -> np.ndarray:
    """Benjamini-Hochberg adjusted p-values (q-values) of one family of tests, NaN entries left out of the family.

    The step-up false-discovery-rate procedure (Benjamini and Hochberg 1995) as ``scipy.stats.false_discovery_control``
    (``method="bh"``) computes it: the i-th smallest of m p-values becomes ``min over j >= i of p_(j) * m / j``, capped
    at 1. Rejecting every test whose adjusted value is at most ``alpha`` controls the expected share of false
    rejections at ``alpha`` (independent or positively dependent tests).

    Args:
        p: ``[test]`` p-values in [0, 1]; NaN marks a test not run (a role with no heads), not counted in m.

    Returns:
        ``[test]`` float64 adjusted values, NaN where ``p`` is NaN.

    Raises:
        ValueError: a finite p-value outside [0, 1] (from scipy).
    """
    from scipy.stats import false_discovery_control

    p = np.asarray(p, dtype=np.float64)
    out = np.full(p.shape, np.nan)
    ok = ~np.isnan(p)
    if ok.any():
        out[ok] = false_discovery_control(p[ok], method="bh")
    return out


def permutation_p(null: np.ndarray, observed: float) -> tuple[float, float]:
    """One-sided Monte Carlo p-values of ``observed`` against ``null`` draws, ``(greater, less)``:
    ``(1 + #{null >= observed}) / (1 + n)`` and ``(1 + #{null <= observed}) / (1 + n)`` (Phipson and Smyth 2010: the
    observed value counts as one draw, so no p-value is 0).

    Args:
        null: ``[draw]`` the statistic under the null (e.g. the mean effect of random head sets).
        observed: the statistic of the tested set.

    Returns:
        ``(p_greater, p_less)``, each in ``(0, 1]``.
    """
    x = np.asarray(null, dtype=np.float64)
    n = x.size
    return float((1 + (x >= observed).sum()) / (1 + n)), float((1 + (x <= observed).sum()) / (1 + n))


def difference_interval(a, b, n: int = 1000, seed: int = 0, level: float = 0.95) -> tuple[float, float, float]:
    """``mean(a) - mean(b)`` of two independent samples and its percentile bootstrap interval: each resample draws
    ``a``'s items and ``b``'s items with replacement, separately (Efron and Tibshirani 1993, ch. 8, two-sample).

    Args:
        a, b: ``[item]`` values of the two groups (e.g. the ``dnll`` of SDHs and of control heads); n: resamples.

    Returns:
        ``(difference, lo, hi)`` floats; the interval is the point where either group has one item or ``n = 0``.
    """
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    d = float(x.mean() - y.mean())
    if n == 0 or x.size < 2 or y.size < 2:
        return d, d, d
    boot = x[resamples(x.size, n, seed)].mean(1) - y[resamples(y.size, n, seed + 1)].mean(1)
    q = (1 - level) / 2
    return d, float(np.quantile(boot, q)), float(np.quantile(boot, 1 - q))
