"""Head effects by atlas role against random heads of the same layers (issue 32 part 3): do the heads the atlas labels
(SDH, sink, induction, retrieval, streaming, previous-token, duplicate-token, echo) matter more for the next-token loss
than other heads of their layers?

Per model, the exact per-head effects ``figures/effects_<model>.csv`` (``interp effects``' table: every head, pydoc
prompts; ``analyses/benchmarks/effects_cost.py`` writes the zero / mean / streaming table of SmolLM2 and the zero /
mean table of Gemma-3). Interventions of ``--interventions`` missing from a model's table are computed here with
``interp.experiments.effects.head_effects`` on the same prompts (``prompts`` / ``tokens`` of the table, else
``--prompts`` x ``--tokens``) and added to it. Then ``interp.experiments.effect_roles.role_effects`` against the atlas
(``figures/atlas_<model>.csv``): per role and intervention the mean ``dnll`` of its heads (with a 95% bootstrap
interval over the role's heads) against ``--draws`` sets of heads drawn from the same layers without the role's own
heads (their 2.5 / 97.5 percentiles: the control), and ``diff``, the role heads minus the other heads of their layers,
with Monte Carlo p-values ``p_greater``, ``p_less`` and two-sided ``p_two`` from ``--draws`` shuffles of the role
within layers (``interp.experiments.controls.layer_difference``); role heads of layers where every head has the role
are left out of the comparison (``heads_compared``).

The p-values are read side by side on the results page (every model, intervention and role), so they are corrected
as one family: ``q_two`` is the Benjamini-Hochberg adjusted ``p_two`` over every row of the written table
(``interp.experiments.stats.bh_adjust``, ``scipy.stats.false_discovery_control``), recomputed whenever a model's rows
change, and ``verdict`` reads it at ``ALPHA`` = 0.05: ``greater`` / ``less`` (the role's mean above / below the random
sets') or ``not distinguished``. ``--draws`` 20000 lets the smallest two-sided p-value (2 / 20001) survive the
correction of about 60 tests.

Writes ``figures/effects_roles.csv`` (rows of models not run are kept) and the effects tables it completed.

    python -m analyses.effects.effects_roles [--models ...] [--interventions zero,streaming] [--prompts 2] [--tokens 128]
        [--draws 20000] [--quick] [--out DIR]
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from analyses._common import atlas_of, load_cpu, parser, replace_rows, run_models, write_rows

ALPHA = 0.05  # false-discovery rate of the role tests' verdicts


def corrected(df: pd.DataFrame, alpha: float = ALPHA) -> pd.DataFrame:
    """``df`` (``effects_roles.csv`` rows of every model) with ``q_two``, the Benjamini-Hochberg adjusted ``p_two`` over
    all its rows (one family), and ``verdict``: ``greater`` / ``less`` where ``q_two <= alpha`` (by the sign of
    ``diff``, the role heads minus the other heads of their layers), ``not distinguished`` where not, empty where the role was not tested."""
    from interp.experiments.stats import bh_adjust

    q = bh_adjust(df["p_two"].to_numpy(dtype=float)) if "p_two" in df else np.full(len(df), np.nan)
    up = (df["diff"] > 0).to_numpy() if "diff" in df else np.zeros(len(df), bool)
    verdict = np.where(np.isnan(q), "", np.where(q <= alpha, np.where(up, "greater", "less"), "not distinguished"))
    return df.assign(q_two=q, verdict=verdict)


def effects_table(name: str, out: Path, kinds: tuple[str, ...], prompts: int, tokens: int, model=None) -> tuple[pd.DataFrame, object]:
    """``out/effects_<name>.csv`` with every intervention of ``kinds``, the missing ones computed (``head_effects``, every
    head, 1000 bootstrap resamples) on the table's own prompts (or ``prompts`` x ``tokens`` pydoc for a new table) and
    written back; returns ``(table, model)`` (the model loaded only when something had to run)."""
    import interp
    from interp.experiments.effects import EffectsConfig, head_effects

    path = out / f"effects_{name}.csv"
    table = pd.read_csv(path) if path.exists() else None
    missing = [k for k in kinds if table is None or k not in set(table["intervention"])]
    if not missing:
        return table, model
    if table is not None:
        prompts, tokens = int(table["prompts"].iloc[0]), int(table["tokens"].iloc[0])
    model = model or load_cpu(name)
    p = interp.corpus.prompts(model, "pydoc", prompts, tokens)
    print(f"{name}: head effects {','.join(missing)} on {prompts} x {tokens} pydoc tokens", flush=True)
    res = head_effects(model, p, EffectsConfig(interventions=tuple(missing), bootstrap=1000), progress=True, log=print)
    new = res.table.assign(model=name, prompts=prompts, tokens=tokens)
    table = new if table is None else replace_rows(table, new, ["intervention"])
    out.mkdir(parents=True, exist_ok=True)
    table.to_csv(path, index=False)
    return table, model


def table_options(ap) -> None:
    """``--prompts`` / ``--tokens``: the pydoc prompts of a model that has no effects table yet (``effects_table``)."""
    ap.add_argument("--prompts", type=int, default=2, help="pydoc prompts of a model without an effects table")
    ap.add_argument("--tokens", type=int, default=128, help="tokens per prompt of a model without an effects table")


def main(argv: list[str] | None = None) -> pd.DataFrame:
    ap = parser(__doc__, "tiny-llama, 2 x 32 tokens, every head, its own small atlas (seconds)")
    ap.add_argument("--interventions", default="zero,streaming", help="interventions the effects tables must hold")
    table_options(ap)
    ap.add_argument("--draws", type=int, default=20000, help="random layer-matched head sets per role")
    args = ap.parse_args(argv)
    if args.quick:
        args.prompts, args.tokens, args.draws = 2, 32, 200
    from interp.experiments.effect_roles import role_effects
    from interp.experiments.effects import parse_interventions

    kinds = parse_interventions(args.interventions)
    frames = []
    for name in run_models(args):
        table, model = effects_table(name, args.out, kinds, args.prompts, args.tokens)
        atlas = atlas_of(model or load_cpu(name), args.quick)
        r = role_effects(table, atlas, draws=args.draws)
        frames.append(r.assign(model=name, prompts=int(table["prompts"].iloc[0]), tokens=int(table["tokens"].iloc[0])))
    df = pd.concat(frames, ignore_index=True)
    path = args.out / "effects_roles.csv"
    if path.exists():  # the family is every row of the table: other models' rows are corrected too
        df = replace_rows(pd.read_csv(path), df, ["model"])
    df = write_rows(corrected(df.drop(columns=["q_two", "verdict"], errors="ignore")), path, merge=False)
    show = df[df["heads"] > 0].filter(["model", "intervention", "role", "heads", "heads_compared", "mean_compared",
                                      "random_lo", "random_hi", "diff", "p_two", "q_two", "verdict"])
    print(show.to_string(index=False))
    return df


if __name__ == "__main__":
    main()
