"""Random head sets as controls: heads drawn from the same layers as a tested set, never from an excluded set.

A head set's effect (removing retrieval heads, streaming a role's heads, unrotating a band in the strongest SDHs) only
means something against sets of other heads that differ in nothing but the property tested. Two things besides the
property change an effect: the layer (on short natural text the early layers dominate the loss) and membership (a
random set that contains the tested heads measures them again, which weakens the test most for large roles). So:

- ``match="layer"``: each layer ``l`` that holds ``c_l`` heads of the tested set contributes ``c_l`` heads drawn from
  its own heads outside ``exclude`` (the drawn set has the tested set's layer histogram); Wu et al. 2024 (Sec. 4)
  mask "the same number of non-retrieval heads";
- ``match="layers"``: ``k`` heads drawn from the pooled heads outside ``exclude`` of the layers the tested set occupies
  (the same layers, not the same histogram), for sets whose layers have too few other heads to match exactly.

Heads are rows of a table; functions take and return row indices so that any table (atlas, effects, retrieval scores)
can be used. Draws are seeded (``numpy.random.default_rng``), so a control is reproducible.
"""

from __future__ import annotations

import numpy as np

from interp.errors import ConfigError

MATCHES = ("layer", "layers")


def layer_pools(layers, target, exclude) -> dict[int, tuple[np.ndarray, int]]:
    """Per layer of the tested set: ``(pool, count)``, the row indices of that layer outside ``exclude`` and the number
    of tested heads in it.

    Args:
        layers: ``[head]`` int layer of every head (row).
        target: ``[k]`` int row indices of the tested set.
        exclude: ``[head]`` bool, heads never drawn (the tested heads are always excluded as well).

    Raises:
        ConfigError: shapes differ, an index out of range, or a repeated target head.
    """
    layers = np.asarray(layers).astype(int)
    target = np.asarray(target, dtype=int).ravel()
    ex = np.asarray(exclude, dtype=bool).ravel().copy()
    if ex.shape != layers.shape:
        raise ConfigError(f"exclude has {ex.size} entries for {layers.size} heads")
    if target.size and (target.min() < 0 or target.max() >= layers.size):
        raise ConfigError(f"target indices must lie in [0, {layers.size}); got {target.min()}..{target.max()}")
    if len(np.unique(target)) != target.size:
        raise ConfigError("target heads repeat")
    ex[target] = True
    ls, counts = np.unique(layers[target], return_counts=True)
    return {int(l): (np.flatnonzero((layers == l) & ~ex), int(c)) for l, c in zip(ls, counts)}


def can_match(layers, target, exclude, match: str = "layer", replace: bool = False) -> bool:
    """Whether ``matched_draws`` can draw with these arguments (every layer, or the pooled layers, holds enough
    heads outside ``exclude``)."""
    pools = layer_pools(layers, target, exclude)
    if match == "layers":
        n = sum(len(p) for p, _ in pools.values())
        return n > 0 if replace else n >= sum(c for _, c in pools.values())
    return all((len(p) > 0) if replace else (len(p) >= c) for p, c in pools.values())


def _pick(pool: np.ndarray, c: int, draws: int, rng, replace: bool) -> np.ndarray:
    if replace:
        return pool[rng.integers(0, len(pool), size=(draws, c))]
    return pool[np.argsort(rng.random((draws, len(pool))), axis=1)[:, :c]]  # c distinct heads per draw


def matched_draws(layers, target, exclude, draws: int, seed: int = 0, match: str = "layer",
                  replace: bool = False) -> np.ndarray:
    """``draws`` random head sets matched to ``target`` (module docstring), as row indices.

    Args:
        layers: ``[head]`` int layer of every head.
        target: ``[k]`` int row indices of the tested set.
        exclude: ``[head]`` bool, never drawn (the tested heads are excluded whatever it says).
        draws: number of sets (>= 1); seed: ``numpy.random.default_rng`` seed.
        match: ``"layer"`` (the tested set's layer histogram) or ``"layers"`` (pooled over its layers).
        replace: draw a set's heads with replacement (a resampled null for averaging effects, e.g. role tests where
            a layer has fewer other heads than role heads); without (default), each set holds ``k`` distinct heads,
            as a set of heads removed together must.

    Returns:
        ``[draws, k]`` int row indices; with ``match="layer"`` the columns follow the tested set's layers in
        ascending order (column ``j`` holds a head of the layer of the ``j``-th tested head in that order).

    Raises:
        ConfigError: an unknown ``match``, ``draws < 1``, bad indices, or a layer (pooled layers) with too few heads
            outside ``exclude`` (none with ``replace``; fewer than needed without).
    """
    if match not in MATCHES:
        raise ConfigError(f"match must be one of {', '.join(MATCHES)}; got {match!r}")
    if draws < 1:
        raise ConfigError(f"draws must be >= 1; got {draws}")
    pools = layer_pools(layers, target, exclude)
    rng = np.random.default_rng(seed)
    if not pools:
        return np.zeros((draws, 0), dtype=int)
    if match == "layers":
        pool = np.concatenate([p for p, _ in pools.values()])
        k = sum(c for _, c in pools.values())
        if (len(pool) == 0) if replace else (len(pool) < k):
            raise ConfigError(f"layers {sorted(pools)} hold {len(pool)} heads outside the excluded ones; {k} needed")
        return _pick(pool, k, draws, rng, replace)
    short = {l: (len(p), c) for l, (p, c) in pools.items() if ((len(p) == 0) if replace else (len(p) < c))}
    if short:
        l, (n, c) = next(iter(short.items()))
        raise ConfigError(f"layer {l} holds {n} heads outside the excluded ones and {c} tested heads "
                          f"({len(short)} such layers); use match='layers' or replace=True")
    return np.concatenate([_pick(p, c, draws, rng, replace) for p, c in pools.values()], axis=1)


def draw_interval(values, level: float = 0.95) -> tuple[float, float, float]:
    """``(mean, lo, hi)`` of one statistic over random sets: the mean of the draws and their ``(1 - level) / 2`` and
    ``(1 + level) / 2`` percentiles (the range a random set falls in, not an interval of the mean).

    Args:
        values: ``[draw]`` e.g. each random set's recall or ``dnll``.

    Raises:
        ConfigError: no finite value.
    """
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    if v.size == 0:
        raise ConfigError("draw_interval needs at least one finite value")
    a = (1 - level) / 2
    return float(v.mean()), float(np.quantile(v, a)), float(np.quantile(v, 1 - a))


def layer_difference(values, layers, member, draws: int, seed: int = 0) -> tuple[float, np.ndarray]:
    """Members against the other heads of their own layers, with a null from shuffling membership within layers.

    The statistic is ``sum_l w_l (mean of members in l - mean of non-members in l)`` over the layers that hold both
    (``w_l`` = the layer's share of those members). The null shuffles membership within each such layer (the layer's
    member count kept; a stratified permutation test, e.g. Good 2005, ch. 3): under "membership says nothing about
    the value within a layer" every shuffle is as likely as the observed labels, so the Monte Carlo p-value
    ``(1 + #{|null| >= |observed|}) / (1 + draws)`` is valid however few heads a layer holds (one member among four
    heads cannot give p below about 1/4), which a comparison with random non-members alone would not be.

    Args:
        values: ``[head]`` float (e.g. each head's ``dnll``).
        layers: ``[head]`` int layer of each head.
        member: ``[head]`` bool (e.g. the heads with a role).
        draws: shuffles (>= 1); seed: ``numpy.random.default_rng`` seed.

    Returns:
        ``(observed, null)``: the statistic (NaN where no layer holds both members and non-members) and ``[draws]``
        its values under the shuffles (empty in that case).

    Raises:
        ConfigError: shapes differ or ``draws < 1``.
    """
    v, lay, m = np.asarray(values, dtype=np.float64), np.asarray(layers).astype(int), np.asarray(member, dtype=bool)
    if not (v.shape == lay.shape == m.shape):
        raise ConfigError(f"values, layers and member must have one entry per head; got {v.shape}, {lay.shape}, {m.shape}")
    if draws < 1:
        raise ConfigError(f"draws must be >= 1; got {draws}")
    rng = np.random.default_rng(seed)
    mixed = [l for l in np.unique(lay[m]) if 0 < m[lay == l].sum() < (lay == l).sum()]
    if not mixed:
        return float("nan"), np.zeros(0)
    total = sum(int(m[lay == l].sum()) for l in mixed)
    observed, null = 0.0, np.zeros(draws)
    for l in mixed:
        x, c = v[lay == l], int(m[lay == l].sum())
        w = c / total
        observed += w * (x[m[lay == l]].mean() - x[~m[lay == l]].mean())
        perm = x[np.argsort(rng.random((draws, len(x))), axis=1)]
        null += w * (perm[:, :c].mean(1) - perm[:, c:].mean(1))
    return float(observed), null
