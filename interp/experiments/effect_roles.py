"""What the atlas's attention-pattern labels are worth causally: head effects (``interp.experiments.effects``) grouped by
the roles of ``interp.experiments.atlas``.

- ``role_effects``: per intervention and role, the mean ``dnll`` of the role's heads against layer-matched random
  heads without the role (each role head replaced by a head drawn from the other heads of its own layer, ``draws``
  times, seeded): the 2.5 / 97.5 percentiles of the random means, one-sided Monte Carlo p-values both ways and a
  two-sided one, and a bootstrap interval of the role's mean over its heads. Layer matching matters: on short natural
  text the early layers dominate the effects, so a role that lives in early layers would look important against heads
  drawn from everywhere; excluding the role's own heads matters for large roles (issue 45), whose random sets would
  otherwise be largely the role again.
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
    """Mean effect of each role's heads against random heads of the same layers without the role (module docstring).

    For each role and intervention, each role head in a layer that also holds heads without the role is matched by a
    head drawn (with replacement, ``interp.experiments.controls.matched_draws``, ``match="layer"``) from those other
    heads of its layer, ``draws`` times: random sets with the role's layer histogram that never contain a head of the
    role (drawing from all heads of the layer, role heads included, weakens the test most for large roles such as
    streaming and sink). Role heads in layers where every head has the role cannot be matched; they are counted in
    ``heads`` but left out of the comparison (``heads_compared``, ``mean_compared``).

    Args:
        effects: ``effects.csv`` rows (``layer, head, intervention, dnll``...).
        atlas: ``atlas.csv`` rows with ``role_<name>`` flags.
        roles: role names (default: every ``role_<name>`` column of ``atlas``).
        draws: random layer-matched head sets per role and intervention; seed: their RNG seed.

    Returns:
        One row per (intervention, role): ``intervention, role, heads, mean_dnll, mean_lo, mean_hi`` (mean ``dnll``
        over all the role's heads, nats, with a 95% percentile bootstrap over them, ``draws`` resamples),
        ``median_dnll``, ``heads_compared, mean_compared`` (the role heads of layers with other heads, and their mean),
        ``random_mean, random_lo, random_hi`` (mean and 2.5 / 97.5 percentiles of the means of ``draws`` random sets
        of other heads: the control, in the role's units), ``diff`` (the role heads minus the other heads of their
        layers, ``interp.experiments.controls.layer_difference``) and its p-values under membership shuffled within
        layers: ``p_greater, p_less`` (one-sided, ``interp.experiments.stats.permutation_p``) and ``p_two`` (on
        ``|diff|``). The p-values come from the shuffles, not from the random sets: a role of one head among a
        layer's four cannot be told from its layer-mates at p below about 1/4, whatever its rank among the three
        others. NaN where the role has no heads (or none that can be compared). The multiple-testing correction is the caller's: it depends
        on which tests are read together (``interp.experiments.stats.bh_adjust``).

    Raises:
        ConfigError: tables without the needed columns.
    """
    from interp.experiments.controls import layer_difference, layer_pools, matched_draws
    from interp.experiments.stats import permutation_p

    t = _joined(effects, atlas)
    roles = roles or tuple(c[len("role_"):] for c in atlas.columns if c.startswith("role_") and atlas[c].dtype == bool)
    rng = np.random.default_rng(seed)
    rows = []
    for kind, d in t.groupby("intervention", sort=False):
        d = d.reset_index(drop=True)
        x_all, layers = d["dnll"].to_numpy(), d["layer"].to_numpy()
        for role in roles:
            flag = d[f"role_{role}"].astype(bool).to_numpy()
            on = np.flatnonzero(flag)
            row = {"intervention": kind, "role": role, "heads": len(on)}
            if not len(on):
                rows.append(row)
                continue
            x = x_all[on]
            boot = x[rng.integers(0, len(x), size=(draws, len(x)))].mean(1)
            row.update(mean_dnll=float(x.mean()), mean_lo=float(np.quantile(boot, 0.025)),
                       mean_hi=float(np.quantile(boot, 0.975)), median_dnll=float(np.median(x)))
            pools = layer_pools(layers, on, flag)
            cmp_ = on[[len(pools[int(l)][0]) > 0 for l in layers[on]]]
            row["heads_compared"] = len(cmp_)
            if len(cmp_):
                rand = x_all[matched_draws(layers, cmp_, flag, draws, seed=int(rng.integers(0, 2**31)), replace=True)].mean(1)
                diff, null = layer_difference(x_all, layers, flag, draws, seed=int(rng.integers(0, 2**31)))
                pg, pl = permutation_p(null, diff)
                row.update(mean_compared=float(x_all[cmp_].mean()), random_mean=float(rand.mean()),
                           random_lo=float(np.quantile(rand, 0.025)), random_hi=float(np.quantile(rand, 0.975)),
                           diff=diff, p_greater=pg, p_less=pl,
                           p_two=float((1 + (np.abs(null) >= abs(diff) - 1e-15).sum()) / (1 + len(null))))
            rows.append(row)
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
