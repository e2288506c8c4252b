"""What the atlas's attention-pattern labels are worth causally: head effects (``interp.experiments.effects``) grouped by
the roles of ``interp.experiments.atlas``.

- ``role_effects``: per intervention and role, the mean ``dnll`` of the role's heads against layer-matched random
  heads (each role head replaced by a head drawn from its own layer, ``draws`` times, seeded): the 2.5 / 97.5
  percentiles of the random means and the share of draws whose mean reaches the role's (a one-sided permutation
  p-value), and a bootstrap interval of the role's mean over its heads. Layer matching matters: on short natural text the early layers dominate the effects, so a role that
  lives in early layers would look important against heads drawn from everywhere.
- ``streaming_auc``: DuoAttention's criterion (Xiao et al. 2024) read causally. A head is streaming when restricting
  it to the sink and recent keys leaves the output unchanged; the atlas labels heads streaming from where their
  attention goes (distant mass). The ROC AUC of the label for predicting a small causal effect: the probability that a
  labelled head's ``dnll`` under the ``streaming`` intervention is below an unlabelled head's (0.5: no better than
  chance, 1: every labelled head is streamed more cheaply than every other head), ``sklearn.metrics.roc_auc_score``.
- ``youden_threshold``: the threshold of a score (distant mass) that best separates a causal label, by Youden's J.

Reads tables only (an ``effects.csv`` and an ``atlas.csv``); it runs no model.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from interp.errors import ConfigError


def _joined(effects: pd.DataFrame, atlas: pd.DataFrame) -> pd.DataFrame:
    need = {"layer", "head"}
    if not need <= set(atlas.columns) or not need | {"intervention", "dnll"} <= set(effects.columns):
        raise ConfigError("role_effects needs an effects table (layer, head, intervention, dnll) and an atlas table "
                          "(layer, head, role_<name> columns)")
    return effects.merge(atlas, on=["layer", "head"], how="inner")


def role_effects(effects: pd.DataFrame, atlas: pd.DataFrame, roles: tuple[str, ...] | None = None, draws: int = 2000,
                 seed: int = 0) -> pd.DataFrame:
    """Mean effect of each role's heads against layer-matched random heads (module docstring).

    Args:
        effects: ``effects.csv`` rows (``layer, head, intervention, dnll``...).
        atlas: ``atlas.csv`` rows with ``role_<name>`` flags.
        roles: role names (default: every ``role_<name>`` column of ``atlas``).
        draws: random layer-matched head sets per role and intervention; seed: their RNG seed.

    Returns:
        One row per (intervention, role): ``intervention, role, heads, mean_dnll, mean_lo, mean_hi`` (95% percentile
        bootstrap of the mean over the role's heads, ``draws`` resamples), ``median_dnll, random_mean, random_lo,
        random_hi, p_greater`` (share of random draws whose mean dnll >= the role's mean).

    Raises:
        ConfigError: tables without the needed columns.
    """
    t = _joined(effects, atlas)
    roles = roles or tuple(c[len("role_"):] for c in atlas.columns if c.startswith("role_") and atlas[c].dtype == bool)
    rng = np.random.default_rng(seed)
    rows = []
    for kind, d in t.groupby("intervention", sort=False):
        by_layer = {l: g["dnll"].to_numpy() for l, g in d.groupby("layer")}
        for role in roles:
            on = d[d[f"role_{role}"].astype(bool)]
            if on.empty:
                rows.append({"intervention": kind, "role": role, "heads": 0})
                continue
            layers = on["layer"].to_numpy()
            rand = np.zeros(draws)
            for l in np.unique(layers):
                k = int((layers == l).sum())
                pool = by_layer[l]
                rand += pool[rng.integers(0, len(pool), size=(draws, k))].sum(1)
            rand /= len(on)
            m = float(on["dnll"].mean())
            x = on["dnll"].to_numpy()
            boot = x[rng.integers(0, len(x), size=(draws, len(x)))].mean(1)
            rows.append({"intervention": kind, "role": role, "heads": len(on), "mean_dnll": m,
                         "mean_lo": float(np.quantile(boot, 0.025)), "mean_hi": float(np.quantile(boot, 0.975)),
                         "median_dnll": float(on["dnll"].median()), "random_mean": float(rand.mean()),
                         "random_lo": float(np.quantile(rand, 0.025)), "random_hi": float(np.quantile(rand, 0.975)),
                         "p_greater": float((rand >= m).mean())})
    return pd.DataFrame(rows)


def streaming_auc(effects: pd.DataFrame, atlas: pd.DataFrame, label: str = "role_streaming",
                  intervention: str = "streaming") -> float:
    """ROC AUC of the atlas's streaming label for a small causal streaming effect (module docstring): the probability
    that a labelled head's ``dnll`` under ``intervention`` is below an unlabelled head's, ties counting one half
    (``sklearn.metrics.roc_auc_score`` of the label against ``-dnll``).

    Raises:
        ConfigError: no rows of ``intervention``, or the label holds for all or none of the heads.
    """
    t = _joined(effects[effects["intervention"] == intervention], atlas)
    if t.empty:
        raise ConfigError(f"no {intervention!r} rows in the effects table; run interp effects --interventions {intervention}")
    y = t[label].astype(bool).to_numpy()
    if y.all() or not y.any():
        raise ConfigError(f"{label} holds for {'every' if y.all() else 'no'} head: the AUC is undefined")
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(y, -t["dnll"].to_numpy()))


def youden_threshold(score, positive) -> tuple[float, float, float]:
    """The threshold on ``score`` that best separates ``positive`` heads (predicted when ``score <= threshold``) from
    the others by Youden's J (true-positive rate minus false-positive rate, maximal; Youden 1950), from
    ``sklearn.metrics.roc_curve``: how an attention-pattern rule's threshold is re-derived from a causal label.

    Args:
        score: ``[head]`` scores (e.g. distant mass), smaller = more likely positive.
        positive: ``[head]`` bools (e.g. causally streamable).

    Returns:
        ``(threshold, tpr, fpr)`` at the best J (the threshold is a value of ``score``).

    Raises:
        ConfigError: lengths differ, NaN scores, or ``positive`` all true or all false.
    """
    from sklearn.metrics import roc_curve

    x, y = np.asarray(score, dtype=float), np.asarray(positive, dtype=bool)
    if x.shape != y.shape or np.isnan(x).any():
        raise ConfigError(f"youden_threshold needs one finite score per label, got {x.shape} scores and {y.shape} labels")
    if y.all() or not y.any():
        raise ConfigError("youden_threshold needs both positive and negative heads")
    fpr, tpr, thr = roc_curve(y, -x)
    k = int(np.argmax(tpr - fpr))
    return float(-thr[k]), float(tpr[k]), float(fpr[k])
