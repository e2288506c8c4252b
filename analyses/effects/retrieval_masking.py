"""Wu et al.'s masking test (2024, Sec. 4): needle-in-a-haystack accuracy with the top-k retrieval heads zeroed against
random heads of the same layers that are not retrieval heads, on needles not used to select the heads (issues 32
part 3 and 45 part 2).

Per model, the retrieval heads are ranked by ``retrieval_score`` of ``figures/retrieval_heads_<model>.csv``
(``analyses/atlas/retrieval_heads.py``: needles of seed ``--select-seed`` 0, ``--select-needles`` 2, the selection).
With ``interp retrieval``'s setup (``interp.experiments.retrieval``: pydoc haystack, a random four-word needle, the
model's chat template, greedy decoding stopping at a newline, here at most ``--max-new-tokens`` = 24 tokens: the
answers take about 16), every trial runs with nothing removed, with the top-k retrieval heads zeroed
(``head_intervention(kind="zero")``) for each k of ``--k``, and with ``--draws`` random sets of k heads
(``interp.experiments.controls.matched_draws``): drawn from the layers of the top k, never a retrieval head (score >
0.1) nor one of the top k (Wu et al.: "randomly mask out the same number of non-retrieval heads"), with the top k's
layer histogram (``matching = layer``) where every such layer has enough other heads, else pooled over the same layers
(``matching = layers``: Gemma-3 has 4 heads a layer, and Qwen2.5's layer 16 holds 11 retrieval heads of 14).

The test needles (``--split held_out``, default) are those of ``interp.experiments.retrieval.held_out``: seeds after
the selection's, so no test needle or haystack window was used to rank the heads (selecting and testing on the same
needles inflates the effect); ``--split selection`` tests on the selection's own needles (``--seed``), as the first
version of this script did. Accuracy: ROUGE-1 recall of the answer (``interp.experiments.retrieval.masked_recall``).

Writes ``figures/effects_retrieval_masking.csv`` (every set x trial: model, split, set, kind, k, draw, matching, length,
depth, needle, rouge1_recall, response) and ``figures/effects_retrieval_masking_summary.csv`` (per model and k: the
needle seeds, the baseline, top-k and pooled random recall, each with a 95% bootstrap interval over trials;
``random_draw_lo`` / ``random_draw_hi``, the 2.5 / 97.5 percentiles of the random sets' recall, one value per set;
``random_min`` / ``random_max``; ``p_top``, the share of random sets (the top set counted as one) whose recall is at
most the top k's, a one-sided Monte Carlo p-value; ``matching``). Rows of models not run are kept.

    python -m analyses.effects.retrieval_masking [--models ...] [--k 5,10,20] [--draws 20] [--lengths 256,512]
        [--depths 0.1,0.5,0.9] [--needles 2] [--split held_out] [--seed 0] [--select-seed 0] [--select-needles 2]
        [--max-new-tokens 24] [--quick] [--out DIR]
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analyses._common import FIGURES, load_cpu, mean_interval, parser, run_models, write_rows


THRESHOLD = 0.1  # Wu et al.'s retrieval-head threshold (the atlas's too)


def ranked_heads(table: pd.DataFrame, threshold: float = THRESHOLD) -> tuple[pd.DataFrame, np.ndarray]:
    """``(ranked, retrieval)``: the heads of a retrieval-score table by ``retrieval_score`` (highest first; NaN last,
    then by ``retrieval_score_all``), index reset, and ``[head]`` bool, the retrieval heads (score > ``threshold``)."""
    t = table.assign(score=table["retrieval_score"].fillna(-1.0), score_all=table.get("retrieval_score_all", 0.0))
    t = t.sort_values(["score", "score_all"], ascending=False, kind="stable").reset_index(drop=True)
    return t, (t["score"] > threshold).to_numpy()


def head_sets(ranked: pd.DataFrame, retrieval: np.ndarray, ks: list[int], draws: int,
              seed: int = 0) -> tuple[dict[str, list[tuple[int, int]]], dict[int, str]]:
    """``({"none": [], "top5": [...], "random5_0": [...], ...}, {k: matching})``: the top-k heads and ``draws``
    random sets per k (``matched_draws``, seeded by ``seed + k``: no retrieval head, none of the top k, the top k's
    layers; ``matching`` ``layer`` where the histogram can be matched, else ``layers``)."""
    from interp.experiments.controls import can_match, matched_draws

    layers = ranked["layer"].to_numpy()
    pairs = list(zip(ranked["layer"].astype(int), ranked["head"].astype(int)))
    sets, matching = {"none": []}, {}
    for k in ks:
        top = np.arange(min(k, len(pairs)))
        sets[f"top{k}"] = [pairs[i] for i in top]
        matching[k] = "layer" if can_match(layers, top, retrieval) else "layers"
        idx = matched_draws(layers, top, retrieval, draws, seed=seed + k, match=matching[k])
        for d, row in enumerate(idx):
            sets[f"random{k}_{d}"] = [pairs[i] for i in row]
    return sets, matching


def summary(trials: pd.DataFrame, ks: list[int]) -> pd.DataFrame:
    """Per model and k: baseline, top-k and pooled random recall with 95% bootstrap intervals over trials; the random
    sets' spread (one recall per set: percentiles, min, max) and ``p_top`` (module docstring)."""
    from interp.experiments.controls import draw_interval
    from interp.experiments.stats import permutation_p

    rows = []
    for name, t in trials.groupby("model", sort=False):
        key = ["length", "depth", "needle"]
        base = t[t["kind"] == "none"].set_index(key)["rouge1_recall"]
        for k in ks:
            top = t[(t["kind"] == "top") & (t["k"] == k)].set_index(key)["rouge1_recall"]
            rnd = t[(t["kind"] == "random") & (t["k"] == k)]
            pooled = rnd.groupby(key)["rouge1_recall"].mean()
            per_draw = rnd.groupby("draw")["rouge1_recall"].mean()
            row = {"model": name, "split": t["split"].iloc[0], "needle_seeds": t["needle_seeds"].iloc[0], "k": k,
                   "trials": len(base), "draws": int(rnd["draw"].nunique()), "matching": rnd["matching"].iloc[0]}
            for col, v in (("baseline", base), ("top", top), ("random", pooled)):
                row[col], row[f"{col}_lo"], row[f"{col}_hi"] = mean_interval(v.to_numpy())
            _, row["random_draw_lo"], row["random_draw_hi"] = draw_interval(per_draw.to_numpy())
            row["random_min"], row["random_max"] = float(per_draw.min()), float(per_draw.max())
            row["p_top"] = permutation_p(per_draw.to_numpy(), float(top.mean()))[1]
            rows.append(row)
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> pd.DataFrame:
    ap = parser(__doc__, "tiny-llama with its own retrieval scores, k = 1, 2, 3 draws, one length, two depths (seconds)")
    ap.add_argument("--k", default="5,10,20", help="numbers of heads removed")
    ap.add_argument("--draws", type=int, default=20, help="random head sets per k")
    ap.add_argument("--lengths", default="256,512")
    ap.add_argument("--depths", default="0.1,0.5,0.9")
    ap.add_argument("--needles", type=int, default=2)
    ap.add_argument("--split", choices=("held_out", "selection"), default="held_out",
                    help="test needles: held out from the selection (default) or the selection's own")
    ap.add_argument("--seed", type=int, default=0, help="needle seed with --split selection")
    ap.add_argument("--select-seed", type=int, default=0, help="needle seed the retrieval scores were measured with")
    ap.add_argument("--select-needles", type=int, default=2, help="needles the retrieval scores were measured with")
    ap.add_argument("--max-new-tokens", type=int, default=24, help="greedy decode budget (an answer takes about 16)")
    args = ap.parse_args(argv)
    from interp.experiments.retrieval import RetrievalConfig, held_out, masked_recall, needle_seeds, run_retrieval

    ks = [int(x) for x in args.k.split(",")]
    lengths, depths = tuple(int(x) for x in args.lengths.split(",")), tuple(float(x) for x in args.depths.split(","))
    select = RetrievalConfig(needles=args.select_needles, seed=args.select_seed)
    if args.quick:
        ks, lengths, depths, args.draws, args.needles = [1, 2], (256,), (0.1, 0.9), 3, 1
        select = RetrievalConfig(lengths=(256,), depths=(0.5,), max_new_tokens=8)
    cfg = RetrievalConfig(lengths=lengths, depths=depths, needles=args.needles, seed=args.seed,
                          max_new_tokens=8 if args.quick else args.max_new_tokens)
    if args.split == "held_out":
        cfg = held_out(cfg, select)
    seeds = " ".join(map(str, sorted(needle_seeds(cfg))))
    frames = []
    for name in run_models(args):
        model = load_cpu(name)
        if args.quick:
            scores = run_retrieval(model, select, log=lambda s: None).heads
        else:
            scores = pd.read_csv(FIGURES / f"retrieval_heads_{name}.csv")
        sets, matching = head_sets(*ranked_heads(scores), ks, args.draws)
        print(f"{name}: {len(sets)} head sets on needle seeds {seeds} ({args.split}); matching {matching}", flush=True)
        t = masked_recall(model, cfg, sets, log=print)
        kind = t["set"].str.extract(r"^([a-z]+)")[0]
        k = t["set"].str.extract(r"(\d+)")[0].astype(float).fillna(0).astype(int)
        draw = t["set"].str.extract(r"_(\d+)$")[0].astype(float).fillna(0).astype(int)
        frames.append(t.assign(model=name, split=args.split, needle_seeds=seeds, kind=kind, k=k, draw=draw,
                               matching=[matching.get(int(x), "") if kk == "random" else "" for kk, x in zip(kind, k)],
                               heads=t["set"].map(lambda s: " ".join(f"L{l}H{h}" for l, h in sets[s]))))
    trials = pd.concat(frames, ignore_index=True)
    cols = ["model", "split", "needle_seeds", "set", "kind", "k", "draw", "matching", "length", "depth", "needle",
            "needle_depth", "rouge1_recall", "response", "heads", "seconds"]
    write_rows(trials[cols], args.out / "effects_retrieval_masking.csv")
    table = summary(trials, ks)
    df = write_rows(table, args.out / "effects_retrieval_masking_summary.csv")
    print(table.to_string(index=False))
    return df


if __name__ == "__main__":
    main()
