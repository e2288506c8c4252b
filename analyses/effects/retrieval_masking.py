"""Wu et al.'s masking test (2024, Sec. 4): needle-in-a-haystack accuracy with the top-k retrieval heads zeroed against
k random heads (issue 32 part 3).

Per model, the retrieval heads are ranked by ``retrieval_score`` of ``figures/retrieval_heads_<model>.csv``
(``analyses/retrieval_heads.py``, needles of seed 0). With ``interp retrieval``'s setup
(``interp.experiments.retrieval``: pydoc haystack, a random four-word needle, the model's chat template, greedy
decoding stopping at a newline, here at most ``--max-new-tokens`` = 24 tokens: the answers take about 16) on the
needles the retrieval scores were measured on (``--seed 0``, two needles: in-sample, as Wu et al. detect and mask on
the same needle-in-a-haystack task; SmolLM2 answers almost none of the needles of other seeds), every trial runs
with nothing removed, with the top-k retrieval heads zeroed (``head_intervention(kind="zero")``) for each k of
``--k``, and with ``--draws`` sets of k random heads drawn from the heads that are not retrieval heads (score <= 0.1,
Wu et al.: "randomly mask out the same number of non-retrieval heads"). Accuracy: ROUGE-1 recall of the answer
(``interp.experiments.retrieval.masked_recall``).

Writes ``figures/effects_retrieval_masking.csv`` (every set x trial: model, set, kind, k, draw, length, depth, needle,
rouge1_recall, response) and ``figures/effects_retrieval_masking_summary.csv`` (per model and k: the baseline, the
top-k and the random recall, each with a 95% bootstrap interval over trials; for random heads the draws are pooled
per trial, and ``random_min`` / ``random_max`` give the spread of the draws' means).

    python analyses/effects/retrieval_masking.py [--models ...] [--k 5,10,20] [--draws 2] [--lengths 256,512]
        [--depths 0.1,0.5,0.9] [--needles 2] [--seed 0] [--max-new-tokens 24] [--quick] [--out DIR]
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd


sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import FIGURES, load_cpu, mean_interval, parser, run_models, write_rows  # noqa: E402


def ranked_heads(table: pd.DataFrame, threshold: float = 0.1) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """``(ranked, others)``: every head by ``retrieval_score`` (highest first; NaN last, then by ``retrieval_score_all``)
    and the heads that are not retrieval heads (score <= ``threshold`` or NaN), the pool of the random sets."""
    t = table.assign(score=table["retrieval_score"].fillna(-1.0), score_all=table.get("retrieval_score_all", 0.0))
    t = t.sort_values(["score", "score_all"], ascending=False, kind="stable")
    pairs = list(zip(t["layer"].astype(int), t["head"].astype(int)))
    return pairs, [p for p, s in zip(pairs, t["score"]) if not s > threshold]


def head_sets(ranked, others, ks: list[int], draws: int, seed: int = 0) -> dict[str, list[tuple[int, int]]]:
    """``{"none": [], "top5": [...], "random5_0": [...], ...}``: the sets of the test (random sets seeded, drawn
    without replacement from ``others``)."""
    rng = np.random.default_rng(seed)
    out = {"none": []}
    for k in ks:
        out[f"top{k}"] = ranked[:k]
        for d in range(draws):
            out[f"random{k}_{d}"] = [others[i] for i in rng.choice(len(others), min(k, len(others)), replace=False)]
    return out


def summary(trials: pd.DataFrame, ks: list[int]) -> pd.DataFrame:
    """Per model and k: baseline, top-k and random recall with 95% bootstrap intervals over trials."""
    rows = []
    for name, t in trials.groupby("model", sort=False):
        key = ["length", "depth", "needle"]
        base = t[t["kind"] == "none"].set_index(key)["rouge1_recall"]
        for k in ks:
            top = t[(t["kind"] == "top") & (t["k"] == k)].set_index(key)["rouge1_recall"]
            rnd = t[(t["kind"] == "random") & (t["k"] == k)]
            pooled = rnd.groupby(key)["rouge1_recall"].mean()
            per_draw = rnd.groupby("draw")["rouge1_recall"].mean()
            row = {"model": name, "k": k, "trials": len(base), "draws": int(rnd["draw"].nunique())}
            for col, v in (("baseline", base), ("top", top), ("random", pooled)):
                row[col], row[f"{col}_lo"], row[f"{col}_hi"] = mean_interval(v.to_numpy())
            row["random_min"], row["random_max"] = float(per_draw.min()), float(per_draw.max())
            rows.append(row)
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> pd.DataFrame:
    ap = parser(__doc__, "tiny-llama with its own retrieval scores, k = 1, 2, one length, two depths (seconds)")
    ap.add_argument("--k", default="5,10,20", help="numbers of heads removed")
    ap.add_argument("--draws", type=int, default=2, help="random head sets per k")
    ap.add_argument("--lengths", default="256,512")
    ap.add_argument("--depths", default="0.1,0.5,0.9")
    ap.add_argument("--needles", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0, help="needle seed (0: the needles the retrieval scores were measured on)")
    ap.add_argument("--max-new-tokens", type=int, default=24, help="greedy decode budget (an answer takes about 16)")
    args = ap.parse_args(argv)
    from interp.experiments.retrieval import RetrievalConfig, masked_recall, run_retrieval

    ks = [int(x) for x in args.k.split(",")]
    lengths, depths = tuple(int(x) for x in args.lengths.split(",")), tuple(float(x) for x in args.depths.split(","))
    if args.quick:
        ks, lengths, depths, args.draws, args.needles = [1, 2], (256,), (0.1, 0.9), 2, 1
    cfg = RetrievalConfig(lengths=lengths, depths=depths, needles=args.needles, seed=args.seed, max_new_tokens=8 if args.quick else args.max_new_tokens)
    frames = []
    for name in run_models(args):
        model = load_cpu(name)
        if args.quick:
            scores = run_retrieval(model, RetrievalConfig(lengths=(256,), depths=(0.5,), max_new_tokens=8), log=lambda s: None).heads
        else:
            scores = pd.read_csv(FIGURES / f"retrieval_heads_{name}.csv")
        sets = head_sets(*ranked_heads(scores), ks, args.draws)
        t = masked_recall(model, cfg, sets, log=print)
        kind = t["set"].str.extract(r"^([a-z]+)")[0]
        k = t["set"].str.extract(r"(\d+)")[0].astype(float).fillna(0).astype(int)
        draw = t["set"].str.extract(r"_(\d+)$")[0].astype(float).fillna(0).astype(int)
        frames.append(t.assign(model=name, kind=kind, k=k, draw=draw, heads=t["set"].map(
            lambda s: " ".join(f"L{l}H{h}" for l, h in sets[s]))))
    trials = pd.concat(frames, ignore_index=True)
    cols = ["model", "set", "kind", "k", "draw", "length", "depth", "needle", "needle_depth", "rouge1_recall", "response",
            "heads", "seconds"]
    write_rows(trials[cols], args.out / "effects_retrieval_masking.csv")
    df = write_rows(summary(trials, ks), args.out / "effects_retrieval_masking_summary.csv")
    print(summary(trials, ks).to_string(index=False))
    return df


if __name__ == "__main__":
    main()
