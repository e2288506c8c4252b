"""DuoAttention's criterion read causally (issue 32 part 3): is the loss change of streaming a head (A-shape: sink +
recent window) small for the heads the atlas's attention-mass rule calls streaming?

Per model, from the ``streaming`` rows of ``figures/effects_<model>.csv`` (``effects_roles.py`` completes them: every
head streamed alone, sink 4 and window 64, on pydoc prompts) and the atlas (``distant_mass``, ``is_streaming``):

- ``auc``: ROC AUC of the rule's label for a small causal effect (``interp.experiments.effect_roles.streaming_auc``,
  ``sklearn.metrics.roc_auc_score``), with a 95% bootstrap interval over heads; ``spearman``: distant mass against the
  streaming ``dnll`` over heads;
- a causal label: a head *needs its distant keys* when the 95% interval of its streaming ``dnll`` lies above 0
  (``dnll_lo > 0``); ``auc_needs``: the AUC of distant mass for that label, and ``youden_threshold`` /
  ``youden_tpr`` / ``youden_fpr``: the distant-mass threshold re-derived from it by Youden's J
  (``interp.experiments.effect_roles.youden_threshold``), beside the rule's ``rule_threshold``;
- the joint test (DuoAttention streams its streaming heads together): on ``--joint-prompts`` held-out pydoc prompts
  (seed 1) of the same length, ``interp.experiments.effects.set_effects`` streams at once the ``n`` heads of lowest
  distant mass (``order = rule``), the ``n`` heads of lowest single-head ``dnll`` (``causal``; ranked on the effects
  prompts, measured on the held-out ones) and ``--draws`` (20) random sets of ``n`` heads drawn uniformly from all
  heads (``random``), for ``n`` = the rule's count and a quarter, half and three quarters of the heads (the ``rule``
  order also at an eighth and three eighths): ``dnll`` with a 95% bootstrap interval over prompts, and ``mass_max``,
  the largest distant mass in the set (for ``rule``: the threshold that streams those heads); ``--random-shares ''``
  keeps the causal and random sets to the rule's count (the rule order still runs at every share), for a large model
  on a busy CPU. Per ``n``,
  ``figures/effects_streaming_joint_summary.csv`` gives the rule's and the causal order's ``dnll`` beside the random
  sets' mean and 2.5 / 97.5 percentiles (the range of one random set, ``interp.experiments.controls.draw_interval``)
  and ``p_rule_below`` / ``p_causal_below``: the share of random sets (the tested set counted as one) whose ``dnll``
  is at most the order's, a one-sided Monte Carlo p-value of "streaming these heads costs less than streaming as many
  random heads".

Writes ``figures/effects_streaming.csv`` (one row per model), ``figures/effects_streaming_joint.csv``,
``figures/effects_streaming_joint_summary.csv``,
``figures/effects_streaming_heads.csv`` (per head: distant mass, the rule's label, the streaming ``dnll``) and the
scatter "where it looks vs what it does" ``figures/effects_streaming.{html,png}`` of every model in that table.

    python -m analyses.effects.streaming_criterion [--models ...] [--joint-prompts 4] [--draws 20] [--random-shares 0.25,0.5,0.75]
        [--quick] [--out DIR]
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analyses._common import atlas_of, load_cpu, mean_interval, parser, run_models, save_figure, write_rows
from analyses.effects.effects_roles import effects_table, table_options

SHARES = (0.25, 0.5, 0.75)  # shares of the heads streamed at once, every order
RULE_SHARES = (0.125, 0.375)  # more points of the rule's own curve, to see where its joint cost leaves 0


def auc_interval(y: np.ndarray, score: np.ndarray, n: int = 1000, seed: int = 0) -> tuple[float, float]:
    """95% percentile bootstrap interval over heads of ``roc_auc_score(y, score)`` (resamples with one class skipped)."""
    from sklearn.metrics import roc_auc_score

    rng = np.random.default_rng(seed)
    vals = []
    for _ in range(n):
        i = rng.integers(0, len(y), len(y))
        if y[i].any() and not y[i].all():
            vals.append(roc_auc_score(y[i], score[i]))
    return float(np.quantile(vals, 0.025)), float(np.quantile(vals, 0.975))


def head_sets(t: pd.DataFrame, counts: list[int], draws: int, seed: int = 0,
              rule_counts: tuple[int, ...] = ()) -> list[tuple[str, int, int, list]]:
    """``(order, n, draw, heads)``: the ``n`` heads of lowest distant mass (``rule``), of lowest streaming ``dnll``
    (``causal``) and ``draws`` random sets of ``n`` (``random``), for each ``n`` of ``counts``; and the ``rule`` set
    alone for each ``n`` of ``rule_counts``."""
    rng = np.random.default_rng(seed)
    pairs = list(zip(t["layer"].astype(int), t["head"].astype(int)))
    by_mass = [pairs[i] for i in np.argsort(t["distant_mass"].to_numpy(), kind="stable")]
    by_effect = [pairs[i] for i in np.argsort(t["dnll"].to_numpy(), kind="stable")]
    out = []
    for n in counts:
        out += [("rule", n, 0, by_mass[:n]), ("causal", n, 0, by_effect[:n])]
        out += [("random", n, d, [pairs[i] for i in rng.choice(len(pairs), n, replace=False)]) for d in range(draws)]
    return out + [("rule", n, 0, by_mass[:n]) for n in rule_counts if n not in counts]


def joint_summary(joint: pd.DataFrame) -> pd.DataFrame:
    """Per model and ``n`` with random sets: the ``rule`` and ``causal`` sets' ``dnll`` (nats) beside the random sets'
    mean, 2.5 / 97.5 percentiles, min and max (``draw_interval``: one value per set) and ``p_rule_below`` /
    ``p_causal_below`` (``interp.experiments.stats.permutation_p``, the ``less`` side: the share of random sets, the
    tested set counted as one, whose ``dnll`` is at most the order's)."""
    from interp.experiments.controls import draw_interval
    from interp.experiments.stats import permutation_p

    rows = []
    for (name, n), g in joint.groupby(["model", "n"], sort=False):
        rnd = g.loc[g["order"] == "random", "dnll"].to_numpy()
        if not len(rnd):
            continue
        row = {"model": name, "n": int(n), "share": float(g["share"].iloc[0]), "rule_count": bool(g["rule_count"].iloc[0]),
               "draws": len(rnd), "prompts": int(g["prompts"].iloc[0]), "tokens": int(g["tokens"].iloc[0])}
        row["random_mean"], row["random_lo"], row["random_hi"] = draw_interval(rnd)
        row["random_min"], row["random_max"] = float(rnd.min()), float(rnd.max())
        for order in ("rule", "causal"):
            v = float(g.loc[g["order"] == order, "dnll"].iloc[0])
            row[f"{order}_dnll"], row[f"p_{order}_below"] = v, permutation_p(rnd, v)[1]
        rows.append(row)
    return pd.DataFrame(rows)


def scatter(tables: dict[str, pd.DataFrame]):
    """One panel per model: distant mass (where the head looks) against the streaming ``dnll`` (what streaming it
    costs), coloured by the rule's label."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=len(tables), subplot_titles=list(tables))
    for c, (name, t) in enumerate(tables.items(), start=1):
        for flag, colour in ((True, "#009E73"), (False, "#D55E00")):
            d = t[t["is_streaming"].astype(bool) == flag]
            fig.add_trace(go.Scatter(x=d["distant_mass"], y=d["dnll"], mode="markers", marker=dict(color=colour, size=5),
                                     name="labelled streaming" if flag else "not labelled", showlegend=c == 1,
                                     error_y=dict(type="data", symmetric=False, array=d["dnll_hi"] - d["dnll"],
                                                  arrayminus=d["dnll"] - d["dnll_lo"], thickness=0.5, width=0),
                                     text=[f"L{r.layer}H{r.head}" for r in d.itertuples()]), row=1, col=c)
        fig.add_hline(y=0, line_dash="dot", row=1, col=c)
    fig.update_xaxes(title_text="distant mass (attention outside sink + window)")
    fig.update_yaxes(title_text="dNLL when streamed alone (nats)", row=1, col=1)
    fig.update_layout(height=420, width=420 * len(tables), title="Where it looks vs what it does: the streaming rule against the causal effect")
    return fig


def main(argv: list[str] | None = None) -> pd.DataFrame:
    ap = parser(__doc__, "tiny-llama, 2 x 96 tokens, its own small atlas (seconds)")
    ap.add_argument("--joint-prompts", type=int, default=4, help="held-out pydoc prompts of the joint test")
    ap.add_argument("--draws", type=int, default=20, help="random head sets per count in the joint test")
    ap.add_argument("--random-shares", default=None,
                    help="shares of the heads that get causal and random sets besides the rule's count (default "
                         "0.25,0.5,0.75; '' for the rule's count only: the rule order still runs at every share)")
    table_options(ap)
    args = ap.parse_args(argv)
    if args.quick:
        args.prompts, args.tokens, args.joint_prompts, args.draws = 2, 96, 2, 3
    import interp
    from scipy.stats import spearmanr
    from sklearn.metrics import roc_auc_score

    from interp.experiments.effect_roles import streaming_auc, youden_threshold
    from interp.experiments.effects import EffectsConfig, set_effects
    from interp.measures.shape import STREAMING_THRESHOLD

    rows, joint, scatters = [], [], {}
    for name in run_models(args):
        eff, model = effects_table(name, args.out, ("streaming",), args.prompts, args.tokens)
        model = model or load_cpu(name)
        atlas = atlas_of(model, args.quick)
        t = eff[eff["intervention"] == "streaming"].merge(atlas[["layer", "head", "distant_mass", "is_streaming"]],
                                                           on=["layer", "head"])
        t = t[t["distant_mass"].notna()].reset_index(drop=True)
        scatters[name] = t
        rule = t["is_streaming"].astype(bool).to_numpy()
        needs = (t["dnll_lo"] > 0).to_numpy()
        P, N = int(eff["prompts"].iloc[0]), int(eff["tokens"].iloc[0])
        row = {"model": name, "prompts": P, "tokens": N, "heads": len(t), "labelled": int(rule.sum()),
               "rule_threshold": STREAMING_THRESHOLD, "needs_distant": int(needs.sum()),
               "labelled_needs_distant": int((rule & needs).sum()),
               "spearman": float(spearmanr(t["distant_mass"], t["dnll"]).statistic),
               "dnll_labelled_median": float(t.loc[rule, "dnll"].median()),
               "dnll_other_median": float(t.loc[~rule, "dnll"].median()) if (~rule).any() else np.nan,
               "dnll_max": float(t["dnll"].max())}
        if 0 < rule.sum() < len(t):
            row["auc"] = streaming_auc(eff, atlas)
            row["auc_lo"], row["auc_hi"] = auc_interval(rule, -t["dnll"].to_numpy())
        if 0 < needs.sum() < len(t):
            row["auc_needs"] = float(roc_auc_score(~needs, -t["distant_mass"].to_numpy()))
            row["youden_threshold"], row["youden_tpr"], row["youden_fpr"] = youden_threshold(t["distant_mass"], ~needs)
        # the joint test on held-out prompts
        held = interp.corpus.prompts(model, "pydoc", args.joint_prompts, N, seed=1)
        shares = SHARES if args.random_shares is None else tuple(float(x) for x in args.random_shares.split(",") if x)
        counts = sorted({int(rule.sum()), *(int(round(s * len(t))) for s in shares)} - {0})
        rule_only = tuple(int(round(s * len(t))) for s in sorted(set(RULE_SHARES) | set(SHARES)))
        sets = head_sets(t, counts, args.draws, rule_counts=rule_only)
        print(f"{name}: joint streaming of {len(sets)} head sets on {args.joint_prompts} x {N} held-out tokens", flush=True)
        dn, _, nll = set_effects(model, held, [s[3] for s in sets], "streaming", EffectsConfig(batch_rows=4))
        mass = dict(zip(zip(t["layer"].astype(int), t["head"].astype(int)), t["distant_mass"]))
        for (order, n, draw, hs), d in zip(sets, dn):
            m, lo, hi = mean_interval(d)
            joint.append({"model": name, "order": order, "n": n, "share": n / len(t), "draw": draw, "rule_count": n == rule.sum(),
                          "mass_max": max(mass[h] for h in hs),
                          "dnll": m, "dnll_lo": lo, "dnll_hi": hi, "clean_nll": float(nll.mean()),
                          "prompts": args.joint_prompts, "tokens": N})
        at_rule = [j for j in joint if j["model"] == name and j["rule_count"]]
        for order in ("rule", "causal", "random"):  # streaming the rule's count of heads at once (random: mean of draws)
            vals = [j["dnll"] for j in at_rule if j["order"] == order]
            row[f"joint_{order}"] = float(np.mean(vals)) if vals else np.nan
        rows.append(row)
    df = write_rows(pd.DataFrame(rows), args.out / "effects_streaming.csv")
    joint = write_rows(pd.DataFrame(joint), args.out / "effects_streaming_joint.csv")
    write_rows(joint_summary(joint[joint["model"].isin([r["model"] for r in rows])]),
               args.out / "effects_streaming_joint_summary.csv")
    cols = ["model", "layer", "head", "distant_mass", "is_streaming", "dnll", "dnll_lo", "dnll_hi", "kl"]
    heads = write_rows(pd.concat([t.assign(model=m) for m, t in scatters.items()])[cols], args.out / "effects_streaming_heads.csv")
    save_figure(scatter({m: heads[heads["model"] == m] for m in heads["model"].unique()}), args.out, "effects_streaming")
    print(pd.DataFrame(rows).to_string(index=False))
    return df


if __name__ == "__main__":
    main()
