"""Induction heads removed (Olsson et al. 2022; issue 32 part 3): the loss on the second copy of repeated random tokens
with the top induction heads zeroed against random heads of the same layers, and each head's prefix-matching score
against its own causal effect.

Prompts: ``interp.corpus`` ``repeated-random`` (BOS, r, r; r of ``(tokens - 1) / 2`` tokens drawn uniformly from the
vocabulary, seed 0). Only the predictions an induction head can make are scored: the tokens of the second copy after
its first (``EffectsConfig.score_from``); on them the clean model's loss is far below the first copy's.

- **sets**: the top-k heads by ``rr_induction_score`` of the atlas (``figures/atlas_<model>.csv``, TransformerLens'
  prefix-matching score on repeated random tokens), k of ``--k``, zeroed together
  (``interp.experiments.effects.set_effects``), against ``--draws`` sets of k heads drawn from the same layers as the
  top-k (a head of layer l replaced by a random head of layer l that is not in the top-k; seeded): ``dnll`` per set with
  a 95% bootstrap interval over prompts;
- **per head** (``--head-prompts`` > 0): every head zeroed alone (``head_effects``, the fast path), ``dnll`` on the
  second copy, against its ``rr_induction_score``: Spearman's rho over heads and the top-k heads' median rank by effect.

Writes ``figures/effects_induction.csv`` (sets), ``figures/effects_induction_heads.csv`` (per head) and
``figures/effects_induction_summary.csv`` (per model and k: the top-k and the random sets' ``dnll``, the clean loss on
the second copy and on the first, Spearman's rho).

    python -m analyses.effects.induction_ablation [--models ...] [--k 5,10] [--draws 20] [--prompts 4] [--tokens 129]
        [--head-prompts 2] [--quick] [--out DIR]
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analyses._common import atlas_of, load_cpu, mean_interval, parser, run_models, write_rows


def second_copy_start(model, tokens: int) -> int:
    """The position of the second token of the second copy in a ``repeated-random`` prompt of ``tokens`` tokens (BOS
    where the model adds one, then r, r with ``len(r) = ceil(body / 2)``): the first prediction an induction head can
    make."""
    body = tokens - (model.bos_token_id is not None)
    return (tokens - body) + -(-body // 2) + 1


def layer_matched(top: list[tuple[int, int]], n_heads: int, draws: int, seed: int = 0) -> list[list[tuple[int, int]]]:
    """``draws`` random sets with as many heads in each layer as ``top``, none of them in ``top`` (seeded)."""
    rng = np.random.default_rng(seed)
    layers = sorted({l for l, _ in top})
    pool = {l: [h for h in range(n_heads) if (l, h) not in top] for l in layers}
    count = {l: sum(1 for x, _ in top if x == l) for l in layers}
    return [[(l, int(h)) for l in layers for h in rng.choice(pool[l], min(count[l], len(pool[l])), replace=False)]
            for _ in range(draws)]


def main(argv: list[str] | None = None) -> pd.DataFrame:
    ap = parser(__doc__, "tiny-llama, its own small atlas, 2 x 33 tokens (seconds)")
    ap.add_argument("--k", default="5,10", help="numbers of top induction heads removed")
    ap.add_argument("--draws", type=int, default=20, help="random layer-matched sets per k")
    ap.add_argument("--prompts", type=int, default=4, help="repeated-random prompts of the set test")
    ap.add_argument("--head-prompts", type=int, default=2, help="of them, the prompts of the per-head effects (0: none)")
    ap.add_argument("--tokens", type=int, default=129, help="tokens per prompt (BOS + two copies)")
    args = ap.parse_args(argv)
    ks = [int(x) for x in args.k.split(",")]
    if args.quick:
        ks, args.draws, args.prompts, args.head_prompts, args.tokens = [2], 4, 2, 2, 33
    import interp
    from scipy.stats import spearmanr

    from interp.experiments.effects import EffectsConfig, head_effects, set_effects

    sets_rows, head_rows, summary = [], [], []
    for name in run_models(args):
        model = load_cpu(name)
        atlas = atlas_of(model, args.quick)
        prompts = interp.corpus.prompts(model, "repeated-random", args.prompts, args.tokens, 0, repeats=2)
        start = second_copy_start(model, args.tokens)
        cfg = EffectsConfig(interventions=("zero",), score_from=start, bootstrap=1000, batch_rows=8)
        ranked = atlas.sort_values("rr_induction_score", ascending=False, kind="stable")
        pairs = list(zip(ranked["layer"].astype(int), ranked["head"].astype(int)))
        sets = []
        for k in ks:
            sets += [("top", k, 0, pairs[:k])] + [("random", k, d, s) for d, s in
                                                    enumerate(layer_matched(pairs[:k], model.card.n_heads, args.draws))]
        print(f"{name}: {len(sets)} head sets zeroed on {args.prompts} x {args.tokens} repeated-random tokens", flush=True)
        dn, _, nll = set_effects(model, prompts, [s[3] for s in sets], "zero", cfg)
        first = EffectsConfig(score_from=1)
        _, _, nll_all = set_effects(model, prompts, [], "zero", first)  # the clean loss over every prediction
        for (kind, k, d, heads), v in zip(sets, dn):
            m, lo, hi = mean_interval(v)
            sets_rows.append({"model": name, "kind": kind, "k": k, "draw": d, "dnll": m, "dnll_lo": lo, "dnll_hi": hi,
                              "heads": " ".join(f"L{l}H{h}" for l, h in heads), "prompts": args.prompts,
                              "tokens": args.tokens, "score_from": start})
        if args.head_prompts:
            res = head_effects(model, prompts[:args.head_prompts], cfg, progress=True)
            t = res.table.merge(atlas[["layer", "head", "rr_induction_score"]], on=["layer", "head"])
            head_rows.append(t.assign(model=name, prompts=args.head_prompts, tokens=args.tokens, score_from=start))
            rho = spearmanr(t["rr_induction_score"], t["dnll"])
            rank = t["dnll"].rank(ascending=False)
        for k in ks:
            s = [r for r in sets_rows if r["model"] == name and r["k"] == k]
            rnd = np.array([r["dnll"] for r in s if r["kind"] == "random"])
            top = next(r for r in s if r["kind"] == "top")
            summary.append({"model": name, "k": k, "top_dnll": top["dnll"], "top_lo": top["dnll_lo"], "top_hi": top["dnll_hi"],
                            "random_mean": float(rnd.mean()), "random_lo": float(np.quantile(rnd, 0.025)),
                            "random_hi": float(np.quantile(rnd, 0.975)), "p_greater": float((rnd >= top["dnll"]).mean()),
                            "draws": len(rnd), "clean_nll_second": float(nll.mean()), "clean_nll_all": float(nll_all.mean()),
                            "spearman": float(rho.statistic) if args.head_prompts else np.nan,
                            "spearman_p": float(rho.pvalue) if args.head_prompts else np.nan,
                            "top_median_rank": float(rank[t.set_index(["layer", "head"]).index.isin(pairs[:k])].median())
                            if args.head_prompts else np.nan, "heads": len(atlas),
                            "top_heads": " ".join(f"L{l}H{h}" for l, h in pairs[:k]),
                            "prompts": args.prompts, "tokens": args.tokens})
    write_rows(pd.DataFrame(sets_rows), args.out / "effects_induction.csv")
    if head_rows:
        write_rows(pd.concat(head_rows, ignore_index=True), args.out / "effects_induction_heads.csv")
    df = write_rows(pd.DataFrame(summary), args.out / "effects_induction_summary.csv")
    print(pd.DataFrame(summary).drop(columns=["top_heads"]).to_string(index=False))
    return df


if __name__ == "__main__":
    main()
