"""Do the strongest SDHs causally need the RoPE planes that the counterfactual band ablation says they use? (issue 32
part 3; paper 004 Table 5 / Fig. 8, per head.)

Per model, the ``--top`` SDHs of the atlas (``figures/atlas_<model>.csv``, ``is_sdh``) with the largest slash score.
Counterfactual (where the head looks): the atlas's ``slash_score_wo_<band>`` / ``slash_score``, the head's own slash
score at its own lag with six planes of the band unrotated, recomputed in the scan's pass (004's statistic, no effect on
the model). Causal (what the model loses): ``interp.experiments.effects.head_effects`` with ``rope_high`` /
``rope_medium`` / ``rope_low`` (the same six planes of the same band unrotated in that head alone, the model run with
it) and ``zero`` (the head removed: the most the head can cost), on pydoc prompts: ``dnll`` with a 95% bootstrap
interval over prompts.

Control (issue 45): as many random heads of the same layers that are not SDHs
(``interp.experiments.controls.matched_draws``, one draw seeded by ``--control-seed``, the SDHs' layer histogram where
each layer has enough other heads, else pooled over the same layers: ``matching``), run through the same four
interventions: a band whose removal costs the SDHs no more than it costs other heads of their layers says nothing
about SDHs.

A head "needs" a band counterfactually where its slash score drops most without it (smallest ratio) and causally where
the loss rises most; ``agree`` says whether the two name the same band, and ``share_of_zero`` = band ``dnll`` /
zero ``dnll``.

Writes ``figures/effects_rope_band.csv`` (one row per head and band; ``group`` ``sdh`` or ``control``) and
``figures/effects_rope_band_summary.csv`` (per model, for the SDHs: heads, heads whose two bands agree, Spearman's rho
of (1 - ratio) against ``dnll`` over heads x bands, the median ``dnll`` per band; for the control: ``control_dnll_<band>``,
the median, and ``diff_<band>`` with ``diff_<band>_lo`` / ``_hi``: the SDHs' mean ``dnll`` minus the control heads',
with a 95% two-sample bootstrap interval over heads, ``interp.experiments.stats.difference_interval``; ``matching``).

    python -m analyses.effects.rope_band_heads [--models ...] [--top 8] [--prompts 2] [--tokens 256] [--control-seed 0]
        [--quick] [--out DIR]
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analyses._common import atlas_of, load_cpu, parser, run_models, write_rows

BANDS = ("high", "medium", "low")


def strongest_sdhs(atlas: pd.DataFrame, top: int) -> pd.DataFrame:
    """The ``top`` SDHs (``is_sdh``) with the largest ``slash_score`` (all heads by slash score where none is an SDH,
    e.g. a tiny random model)."""
    sdh = atlas[atlas["is_sdh"].astype(bool)] if atlas["is_sdh"].astype(bool).any() else atlas
    return sdh.sort_values("slash_score", ascending=False, kind="stable").head(top)


def control_heads(atlas: pd.DataFrame, heads: pd.DataFrame, seed: int = 0) -> tuple[pd.DataFrame, str]:
    """``(rows, matching)``: as many atlas rows as ``heads``, drawn from the layers of ``heads`` among the heads that
    are neither SDHs (``is_sdh``) nor in ``heads`` (``matched_draws``, one draw; ``matching`` ``layer`` where the layer
    histogram can be matched, else ``layers``)."""
    from interp.experiments.controls import can_match, matched_draws

    a = atlas.reset_index(drop=True)
    key = a.set_index(["layer", "head"]).index
    target = key.get_indexer(pd.MultiIndex.from_frame(heads[["layer", "head"]]))
    exclude = a["is_sdh"].astype(bool).to_numpy()
    match = "layer" if can_match(a["layer"], target, exclude) else "layers"
    return a.iloc[matched_draws(a["layer"], target, exclude, 1, seed=seed, match=match)[0]], match


def band_table(heads: pd.DataFrame, effects: pd.DataFrame) -> pd.DataFrame:
    """One row per head and band: the counterfactual ``ratio`` (``slash_score_wo_<band>`` / ``slash_score``; NaN when
    the atlas ran without band ablations), the causal ``dnll`` (``dnll_lo``, ``dnll_hi``, ``kl``) and the head's
    ``dnll_zero``; per head, ``cf_band`` (smallest ratio), ``causal_band`` (largest ``dnll``) and ``agree``."""
    e = effects.set_index(["layer", "head", "intervention"])
    rows = []
    for r in heads.itertuples():
        z = e.loc[(r.layer, r.head, "zero")]
        for b in BANDS:
            x = e.loc[(r.layer, r.head, f"rope_{b}")]
            cf = getattr(r, f"slash_score_wo_{b}", np.nan)
            rows.append({"layer": r.layer, "head": r.head, "slash_delta": r.slash_delta, "slash_score": r.slash_score,
                         "band": b, "ratio": cf / r.slash_score, "dnll": x["dnll"], "dnll_lo": x["dnll_lo"],
                         "dnll_hi": x["dnll_hi"], "kl": x["kl"], "dnll_zero": z["dnll"], "share_of_zero": x["dnll"] / z["dnll"]})
    t = pd.DataFrame(rows)
    g = t.groupby(["layer", "head"])
    cf_band = t.loc[g["ratio"].idxmin().dropna(), ["layer", "head", "band"]] if t["ratio"].notna().any() else None
    causal_band = t.loc[g["dnll"].idxmax(), ["layer", "head", "band"]].rename(columns={"band": "causal_band"})
    t = t.merge(causal_band, on=["layer", "head"])
    if cf_band is not None:
        t = t.merge(cf_band.rename(columns={"band": "cf_band"}), on=["layer", "head"], how="left")
    else:
        t["cf_band"] = np.nan
    t["agree"] = t["cf_band"] == t["causal_band"]
    return t


def main(argv: list[str] | None = None) -> pd.DataFrame:
    ap = parser(__doc__, "tiny-llama, its own small atlas, 2 x 32 tokens (seconds)")
    ap.add_argument("--top", type=int, default=8, help="strongest SDHs per model")
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--control-seed", type=int, default=0, help="seed of the random non-SDH heads of the same layers")
    args = ap.parse_args(argv)
    if args.quick:
        args.top, args.prompts, args.tokens = 3, 2, 32
    import interp
    from scipy.stats import spearmanr

    from interp.experiments.effects import EffectsConfig, head_effects

    from interp.experiments.stats import difference_interval

    frames, summary = [], []
    for name in run_models(args):
        model = load_cpu(name)
        atlas = atlas_of(model, args.quick)
        heads = strongest_sdhs(atlas, args.top)
        control, matching = control_heads(atlas, heads, args.control_seed)
        prompts = interp.corpus.prompts(model, "pydoc", args.prompts, args.tokens)
        pairs = tuple(zip(heads["layer"].astype(int), heads["head"].astype(int)))
        ctrl = tuple(zip(control["layer"].astype(int), control["head"].astype(int)))
        cfg = EffectsConfig(interventions=("zero",) + tuple(f"rope_{b}" for b in BANDS), heads=pairs + ctrl, bootstrap=1000)
        print(f"{name}: {len(pairs)} SDHs and {len(ctrl)} control heads ({matching}) x zero + three bands on "
              f"{args.prompts} x {args.tokens} pydoc tokens", flush=True)
        eff = head_effects(model, prompts, cfg, progress=True).table
        t = band_table(heads, eff)
        c = band_table(control, eff)
        frames += [t.assign(model=name, group="sdh", prompts=args.prompts, tokens=args.tokens),
                   c.assign(model=name, group="control", prompts=args.prompts, tokens=args.tokens)]
        per_head = t.drop_duplicates(["layer", "head"])
        ok = t["ratio"].notna()
        row = {"model": name, "heads": len(per_head), "agree": int(per_head["agree"].sum()),
               "spearman": float(spearmanr(1 - t.loc[ok, "ratio"], t.loc[ok, "dnll"]).statistic) if ok.sum() > 2 else np.nan,
               "prompts": args.prompts, "tokens": args.tokens, "control_heads": len(ctrl), "matching": matching,
               "control": " ".join(f"L{l}H{h}" for l, h in ctrl)}
        for b in BANDS:
            sel, csel = t[t["band"] == b], c[c["band"] == b]
            row[f"dnll_{b}"] = float(sel["dnll"].median())
            row[f"ratio_{b}"] = float(sel["ratio"].median())
            row[f"causal_{b}"] = int((per_head["causal_band"] == b).sum())
            row[f"cf_{b}"] = int((per_head["cf_band"] == b).sum())
            row[f"control_dnll_{b}"] = float(csel["dnll"].median())
            row[f"diff_{b}"], row[f"diff_{b}_lo"], row[f"diff_{b}_hi"] = difference_interval(sel["dnll"], csel["dnll"])
        row["dnll_zero"] = float(per_head["dnll_zero"].median())
        row["control_dnll_zero"] = float(c.drop_duplicates(["layer", "head"])["dnll_zero"].median())
        summary.append(row)
    write_rows(pd.concat(frames, ignore_index=True), args.out / "effects_rope_band.csv")
    df = write_rows(pd.DataFrame(summary), args.out / "effects_rope_band_summary.csv")
    print(pd.DataFrame(summary).to_string(index=False))
    return df


if __name__ == "__main__":
    main()
