"""Retrieval heads (Wu et al. 2024) of the zoo models: needle-in-a-haystack on pydoc text, scored at decode time.

For each model, ``interp.experiments.retrieval.run_retrieval`` (the rule, its source and what differs from the
reference are in that module's docstring): a seeded random needle ("The secret code of the <adjective> <animal> is
<w1> <w2> <w3> <w4>.") is placed at each depth of a pydoc haystack of each length; the model answers the question
greedily (KV cache on, at most 50 tokens, its chat template where its tokenizer has one); a head's retrieval score
is the share of needle tokens it copies (top-1 attention on the needle position holding the token generated),
averaged over the trials the model answers (ROUGE-1 recall > 0.5). Wu et al. used 7B-70B models and 1k-50k-token
haystacks; here 135M-500M models at 256-1024 tokens (their contexts allow more; CPU time does not).

Writes per model ``retrieval_heads_<model>.csv`` (``model, layer, head, kv_head, retrieval_score, retrieval_score_all,
hits, hits_all, trials_retrieved, trials, rr_induction_score``; the last: TransformerLens' induction score on 4 x 512
repeated random tokens, ``interp scan --measure token_match``, for the comparison), ``retrieval_heads_<model>_trials.csv`` (every prompt: needle position,
answer, response, ROUGE-1 recall), and for all models ``retrieval_heads_copy.csv`` (copy accuracy per model, length
and depth), ``retrieval_heads_summary.csv`` (per model: trials, retrieved, mean recall, heads with score >= 0.1 and
>= 0.5, the top five heads by retrieval and by induction score, how many are in both, the Spearman correlation
of the two scores over all heads, seconds, the grid; rows of models not run keep their values) and ``retrieval_heads.{html,png}`` (layer x head heatmaps).

    python -m analyses.atlas.retrieval_heads [--models ...] [--lengths 256,512,1024] [--depths 0.1,0.3,0.5,0.7,0.9]
                                       [--needles 2] [--quick] [--figure-only] [--out DIR]
"""

from __future__ import annotations

import time
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots

import interp
from interp.experiments.retrieval import RetrievalConfig, run_retrieval

from analyses._common import MODELS, parser, save_figure

THRESHOLDS = (0.1, 0.5)


def induction_scores(model, n_prompts: int, n_tokens: int, seed: int = 0) -> pd.DataFrame:
    """``layer, head, rr_induction_score``: TransformerLens' induction score (``--measure token_match``) on repeated
    random tokens (``interp.corpus`` ``repeated-random``: BOS, r, r), for the comparison with the retrieval score."""
    from interp.engine.config import switch_on

    p = interp.corpus.prompts(model, "repeated-random", n_prompts, n_tokens, seed)
    heads = interp.scan(model, p, switch_on(interp.ScanConfig(counterfactual_sinks=False), ["token_match"])).heads
    return heads[["layer", "head", "induction_score"]].rename(columns={"induction_score": "rr_induction_score"})


def summarise(name: str, heads: pd.DataFrame, trials: pd.DataFrame, seconds: float, grid: str = "") -> dict:
    """One summary row of a model (the top heads by ``retrieval_score``, or by ``retrieval_score_all`` if none retrieved).

    ``spearman_induction`` (the rank correlation of that score with ``rr_induction_score`` over heads) is NaN when
    either column is constant (every head 0, as in the quick mode's tiny model): a correlation is undefined there.
    """
    key = "retrieval_score" if trials["retrieved"].any() else "retrieval_score_all"
    top = heads.sort_values(key, ascending=False).head(5)
    row = dict(model=name, trials=len(trials), retrieved=int(trials["retrieved"].sum()),
               rouge1_recall=round(float(trials["rouge1_recall"].mean()), 3), ranked_by=key)
    for t in THRESHOLDS:
        row[f"heads_ge_{t:g}"] = int((heads["retrieval_score"] >= t).sum())
    row["n_heads"] = len(heads)
    row["top_heads"] = " ".join(f"L{r.layer}H{r.head}" for r in top.itertuples())
    row["top_scores"] = " ".join(f"{getattr(r, key):.3f}" for r in top.itertuples())
    if "rr_induction_score" in heads:
        ind = heads.sort_values("rr_induction_score", ascending=False).head(5)
        row["top_induction_heads"] = " ".join(f"L{r.layer}H{r.head}" for r in ind.itertuples())
        row["top_in_both"] = len(set(row["top_heads"].split()) & set(row["top_induction_heads"].split()))
        constant = heads[key].nunique() < 2 or heads["rr_induction_score"].nunique() < 2  # e.g. no head retrieves anything
        row["spearman_induction"] = float("nan") if constant else round(float(heads[key].corr(heads["rr_induction_score"], method="spearman")), 3)
    row["seconds"] = round(seconds, 1)
    row["grid"] = grid
    return row


def figure(tables: dict[str, pd.DataFrame]) -> go.Figure:
    fig = make_subplots(rows=1, cols=len(tables), subplot_titles=list(tables), horizontal_spacing=0.06)
    for i, (name, h) in enumerate(tables.items(), 1):
        z = h.pivot(index="layer", columns="head", values="retrieval_score").values
        fig.add_trace(go.Heatmap(z=z, colorscale="Viridis", zmin=0, zmax=1, showscale=i == len(tables),
                                 hovertemplate="L%{y}H%{x}: %{z:.3f}<extra></extra>"), row=1, col=i)
        fig.update_xaxes(title_text="head", row=1, col=i)
        fig.update_yaxes(title_text="layer", row=1, col=i)
    fig.update_layout(title="Retrieval score per head (Wu et al. 2024)<br><sup>share of needle tokens copied by top-1 "
                      "attention, over the prompts the model answers</sup>", height=600, width=420 * len(tables) + 100)
    return fig


def main(argv: list[str] | None = None) -> pd.DataFrame:
    ap = parser(__doc__, "tiny-llama, one length of 200 tokens, two depths, 6 generated tokens")
    ap.add_argument("--lengths", default="256,512,1024")
    ap.add_argument("--depths", default="0.1,0.3,0.5,0.7,0.9")
    ap.add_argument("--needles", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--figure-only", action="store_true", help="redraw the heatmaps from the tables in --out, run nothing")
    args = ap.parse_args(argv)
    if args.figure_only:
        save_figure(figure(_tables(args.out, {})), args.out, "retrieval_heads")
        return pd.read_csv(args.out / "retrieval_heads_summary.csv")
    torch.set_num_threads(1)
    if args.quick:
        models, cfg = ["tiny-llama"], RetrievalConfig(lengths=(200,), depths=(0.2, 0.8), needles=1, max_new_tokens=6)
    else:
        models = [m for m in args.models if interp.models.is_installed(m)]
        skipped = [m for m in args.models if m not in models]
        if skipped:
            print(f"not installed, skipped: {', '.join(skipped)} (see DESIGN: the zoo's optional models)")
        cfg = RetrievalConfig(lengths=tuple(int(x) for x in args.lengths.split(",")),
                              depths=tuple(float(x) for x in args.depths.split(",")), needles=args.needles, seed=args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    tables, copy, summary = {}, [], []
    for name in models:
        t0 = time.perf_counter()
        model = interp.load_model(name, device="cpu")
        r = run_retrieval(model, cfg, progress=True)
        secs = time.perf_counter() - t0
        heads = r.heads.assign(model=name)[["model", *r.heads.columns]]
        heads = heads.merge(induction_scores(model, *((2, 64) if args.quick else (4, 512))), on=["layer", "head"])
        heads.to_csv(args.out / f"retrieval_heads_{name}.csv", index=False)
        r.trials.assign(model=name)[["model", *r.trials.columns]].to_csv(args.out / f"retrieval_heads_{name}_trials.csv", index=False)
        copy.append(r.summary.assign(model=name))
        grid = (f"lengths {'/'.join(map(str, cfg.lengths))}; depths {'/'.join(f'{d:g}' for d in cfg.depths)}; "
                f"{cfg.needles} needles; template {cfg.template}")
        summary.append(summarise(name, heads, r.trials, secs, grid))
        tables[name] = heads
        s = summary[-1]
        print(f"{name}: {s['retrieved']} of {s['trials']} trials retrieved, mean recall {s['rouge1_recall']:.2f}; "
              f"top heads {s['top_heads']} ({s['top_scores']}); {secs:.0f} s", flush=True)
        del model
    c = pd.concat(copy, ignore_index=True)[["model", "length", "depth", "rouge1_recall", "retrieved", "trials"]]
    _update(c, args.out / "retrieval_heads_copy.csv", models)
    out = pd.DataFrame(summary)
    _update(out, args.out / "retrieval_heads_summary.csv", models)
    save_figure(figure(tables if args.quick else _tables(args.out, tables)), args.out, "retrieval_heads")
    return out


def _tables(out: Path, tables: dict[str, pd.DataFrame]) -> dict[str, pd.DataFrame]:
    """``tables`` plus the table of every zoo model that has one in ``out`` (the heatmaps show them all), zoo order."""
    found = {m: tables.get(m) if m in tables else pd.read_csv(out / f"retrieval_heads_{m}.csv")
             for m in MODELS if m in tables or (out / f"retrieval_heads_{m}.csv").exists()}
    return {**found, **{m: t for m, t in tables.items() if m not in found}}


def _update(table: pd.DataFrame, path: Path, models: list[str]) -> None:
    """Write ``table`` to ``path``, keeping the rows of models not run now (one model can be rerun on its own)."""
    if path.exists():
        old = pd.read_csv(path)
        table = pd.concat([old[~old["model"].isin(models)], table], ignore_index=True)
    table.to_csv(path, index=False)


if __name__ == "__main__":
    main()
