"""From head labels to a KV-cache budget (issue 48): the geometric predictor against measured attention, and quality
curves of streaming the lowest-ranked share of kv heads under each order.

Per model:

1. One scan of ``--prompts`` pydoc prompts x ``--tokens`` (seed 0) with the ``shape`` and ``kv_budget`` measures: per
   query head the measured ``distant_mass`` and ``slash_score``, the predicted ``geo_distant_mass``, ``geo_slash_score``,
   ``geo0_distant_mass`` (zeroth order) and kvpress's ``kvpress_score``; beside them the single-head streaming ``dnll``
   of the committed ``figures/effects_<model>.csv`` (``effects_roles.py``; sink 4, window 64, on its own prompts).
   Validation (``kv_budget_validation.csv``): Spearman rank correlation and mean absolute error of predicted against
   measured, and Spearman of every score against the streaming ``dnll`` per query head and per kv head (the sign is
   flipped for keep-scores, so a positive value means "ranks the costly heads as keep").
2. Quality curves (``kv_budget_curves.csv``): for every order of ``interp.experiments.kv_budget.ORDERS`` and
   ``--draws`` random orders, the lowest-ranked ``k`` share of kv heads (k in ``SHARES``) streamed together (every
   query head of a streamed kv head: sink 4, window 64), measured as the next-token loss change on ``--loss-prompts``
   held-out pydoc prompts (seed 1) x ``--loss-tokens`` (``set_effects``) and the needle-in-a-haystack recall
   (``masked_recall``, ROUGE-1 recall of the answer) at ``--niah-length`` tokens, depths ``--depths``, ``--needles``
   needles each; 95% bootstrap intervals over prompts / trials (``interp.experiments.stats.bootstrap_interval``);
   ``kv_saved``: the KV-cache share saved at the loss length (``kv_cache_saved``).

3. Summary (``kv_budget_summary.csv``, ``summary``): per order, the cost at DuoAttention's published streamed share
   (75% of heads streamed for MHA, 50% for GQA; MQA read as GQA) and the largest share up to which the order stays
   within the single-effect order's interval (loss, recall) or keeps the clean recall.

Writes ``figures/kv_budget_heads.csv``, ``figures/kv_budget_validation.csv``, ``figures/kv_budget_curves.csv``,
``figures/kv_budget_summary.csv`` and the figure ``figures/kv_budget_curves.{html,png}``.

    python -m analyses.effects.kv_budget [--models ...] [--tokens 1024] [--loss-tokens 1024] [--niah-length 512] [--quick]
        [--no-curves] [--parts loss niah] [--summary-only] [--merge-from RUN_DIR ...]
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from analyses._common import load_cpu, merge_sources, parser, run_models, save_figure, write_rows
from analyses.effects.effects_roles import effects_table

SHARES = (0.0, 0.25, 0.5, 0.75, 0.9)
TABLES = ("kv_budget_heads.csv", "kv_budget_validation.csv", "kv_budget_curves.csv")  # per model, joined by --merge-from
SCORES = {"geometric": "geo_distant_mass", "geometric_zeroth": "geo0_distant_mass", "distant_mass": "distant_mass",
          "kvpress": "kvpress_score"}
SINK, WINDOW = 4, 64  # the effects tables' A-shape (interp.experiments.effects.EffectsConfig defaults)


def spearman(x, y) -> float:
    """Spearman rank correlation over the finite pairs."""
    from scipy.stats import spearmanr

    x, y = np.asarray(x, float), np.asarray(y, float)
    ok = np.isfinite(x) & np.isfinite(y)
    return float(spearmanr(x[ok], y[ok]).statistic) if ok.sum() > 2 else np.nan


def validation(name: str, t: pd.DataFrame, card, draws: int) -> dict:
    """One row: predicted vs measured (Spearman, MAE) and every score against the single-head streaming cost."""
    from interp.experiments.kv_budget import per_kv_head

    row = {"model": name, "heads": len(t), "kv_heads": card.n_layers * card.n_kv_heads}
    for pred, meas in (("geo_distant_mass", "distant_mass"), ("geo0_distant_mass", "distant_mass"),
                       ("geo_slash_score", "slash_score"), ("kvpress_score", "distant_mass")):
        row[f"rho_{pred}_vs_{meas}"] = spearman(t[pred], t[meas])
        if pred != "kvpress_score":
            row[f"mae_{pred}"] = float(np.nanmean(np.abs(t[pred] - t[meas])))
    cost_kv = per_kv_head(t, card, "dnll", "sum")  # streaming a kv head ~ streaming its query heads
    for order, col in SCORES.items():  # keep-scores: a costly head should score high
        row[f"rho_cost_{order}"] = spearman(t[col], t["dnll"])
        row[f"rho_cost_kv_{order}"] = spearman(per_kv_head(t, card, col).ravel(), cost_kv.ravel())
    rng = np.random.default_rng(0)
    row["rho_cost_random"] = float(np.mean([spearman(rng.permutation(len(t)), t["dnll"]) for _ in range(max(draws, 1))]))
    row["slash_delta_agree"] = float((t["geo_slash_delta"] == t["slash_delta"]).mean())
    return row


def orders(t: pd.DataFrame, card, draws: int) -> dict[str, np.ndarray]:
    """Keep-scores ``[layer, kv_head]`` of every order, and ``draws`` random ones (``random0``, ...)."""
    from interp.experiments.kv_budget import ORDERS, kv_scores

    eff = t.assign(intervention="streaming")
    out = {o: kv_scores(t, card, o, eff) for o in ORDERS}
    rng = np.random.default_rng(0)
    for d in range(draws):
        out[f"random{d}"] = rng.random((card.n_layers, card.n_kv_heads))
    return out


def reused_heads(args, name: str) -> pd.DataFrame | None:
    """``--out``'s ``kv_budget_heads.csv`` rows of ``name`` when they come from a scan of the same ``--prompts`` x
    ``--tokens`` (a run that adds the curves to a model validated before does not scan again), else None."""
    path = args.out / "kv_budget_heads.csv"
    if args.quick or not path.exists():
        return None
    t = pd.read_csv(path)
    t = t[(t["model"] == name) & (t["scan_prompts"] == args.prompts) & (t["scan_tokens"] == args.tokens)]
    return t.reset_index(drop=True) if len(t) else None


def curves(name: str, model, t: pd.DataFrame, args) -> pd.DataFrame:
    """Loss change and NIAH recall of streaming the lowest-ranked share of kv heads, every order and share."""
    import interp
    from interp.experiments.effects import EffectsConfig, set_effects
    from interp.experiments.kv_budget import kv_cache_saved, query_heads, streamed
    from interp.experiments.retrieval import RetrievalConfig, masked_recall
    from interp.experiments.stats import bootstrap_interval

    card = model.card
    sc = orders(t, card, args.draws)
    sets = {}
    for order, s in sc.items():
        for share in SHARES:
            kv = streamed(s, share)
            sets[(order, share)] = kv
    keys = [k for k in sets if k[1] > 0]
    nan = np.full(args.loss_prompts, np.nan)
    loss, nll, rec = {}, nan, pd.DataFrame({"set": pd.Series(dtype=str), "rouge1_recall": pd.Series(dtype=float)})
    if "loss" in args.parts:
        held = interp.corpus.prompts(model, "pydoc", args.loss_prompts, args.loss_tokens, seed=1)
        print(f"{name}: loss of {len(keys)} kv-head sets on {args.loss_prompts} x {args.loss_tokens} held-out tokens", flush=True)
        dn, _, nll = set_effects(model, held, [query_heads(sets[k], card) for k in keys], "streaming",
                                 EffectsConfig(sink=SINK, window=WINDOW, batch_rows=args.batch_rows))
        loss = {k: dn[i] for i, k in enumerate(keys)}
    if "niah" in args.parts:
        cfg = RetrievalConfig(lengths=(args.niah_length,), depths=tuple(args.depths), needles=args.needles, max_new_tokens=12)
        drop = {f"random{d}" for d in range(args.niah_draws, args.draws)}  # random orders beyond --niah-draws: loss only
        named = {"none": []} | {f"{o}@{s}": query_heads(sets[(o, s)], card) for o, s in keys if o not in drop}
        print(f"{name}: NIAH of {len(named)} sets x {len(args.depths) * args.needles} trials at {args.niah_length} tokens",
              flush=True)
        rec = masked_recall(model, cfg, named, "streaming", log=print)
    rows = []
    for (order, share), kv in sets.items():
        d = loss.get((order, share), np.zeros(args.loss_prompts) if "loss" in args.parts else nan)
        r = rec[rec["set"] == ("none" if share == 0 else f"{order}@{share}")]["rouge1_recall"].to_numpy()
        (dlo,), (dhi,) = bootstrap_interval(d[None], 1000)
        (rlo,), (rhi,) = bootstrap_interval(r[None], 1000) if len(r) else ((np.nan,), (np.nan,))
        rows.append({"model": name, "order": order.rstrip("0123456789") if order.startswith("random") else order,
                     "draw": int(order[6:]) if order.startswith("random") else 0, "share": share,
                     "kv_heads_streamed": len(kv), "kv_heads": card.n_layers * card.n_kv_heads,
                     "dnll": float(d.mean()), "dnll_lo": float(dlo), "dnll_hi": float(dhi), "clean_nll": float(nll.mean()),
                     "recall": float(r.mean()) if len(r) else np.nan, "recall_lo": float(rlo), "recall_hi": float(rhi),
                     "trials": len(r) if len(r) else np.nan,
                     "kv_saved": kv_cache_saved(card, kv, args.loss_tokens, SINK, WINDOW) if "loss" in args.parts else np.nan,
                     "kv_saved_niah": kv_cache_saved(card, kv, args.niah_length, SINK, WINDOW) if "niah" in args.parts else np.nan,
                     "loss_prompts": args.loss_prompts if "loss" in args.parts else np.nan,
                     "loss_tokens": args.loss_tokens if "loss" in args.parts else np.nan,
                     "niah_length": args.niah_length if "niah" in args.parts else np.nan, "sink": SINK, "window": WINDOW})
    return pd.DataFrame(rows)


LOSS_COLUMNS = ("dnll", "dnll_lo", "dnll_hi", "clean_nll", "kv_saved", "loss_prompts", "loss_tokens")
NIAH_COLUMNS = ("recall", "recall_lo", "recall_hi", "trials", "kv_saved_niah", "niah_length")


def join_parts(c: pd.DataFrame) -> pd.DataFrame:
    """Curves rows of runs of one part each (``--parts loss`` / ``--parts niah``) joined per ``(model, order, draw,
    share)``: the loss cells from the rows that measured the loss (``dnll`` not NaN), the recall cells from the rows that
    ran the needles (``recall`` not NaN), the rest from the first row; a row with both keeps its own."""
    keys = ["model", "order", "draw", "share"]
    base = c.groupby(keys, sort=False).first().reset_index()
    for cols, flag in ((LOSS_COLUMNS, "dnll"), (NIAH_COLUMNS, "recall")):
        part = c[c[flag].notna()].drop_duplicates(keys, keep="last").set_index(keys)[list(cols)]
        base = base.set_index(keys)
        base.loc[part.index.intersection(base.index), list(cols)] = part
        base = base.reset_index()
        base.loc[base[flag].isna(), [c for c in cols if c != flag]] = np.nan  # a part that did not run: no settings
    return base


DUO_STREAMED = {"MHA": 0.75, "GQA": 0.5}  # DuoAttention's published splits: 25% of heads full for MHA, 50% for GQA


def attention_kind(card) -> str:
    """``MHA`` (one kv head per query head), ``MQA`` (one kv head per layer) or ``GQA``."""
    return "MHA" if card.n_kv_heads == card.n_heads else "MQA" if card.n_kv_heads == 1 else "GQA"


def summary(c: pd.DataFrame, kinds: dict[str, str]) -> pd.DataFrame:
    """Per model and order (random: the mean of its draws): the loss change, recall and KV saved at DuoAttention's
    published streamed share for the model's attention kind (``DUO_STREAMED``; MQA read as GQA); ``max_share_effects_loss``
    / ``max_share_effects_recall``: the largest share up to which (every share at or below it) the order's mean loss
    change stays within the ``effects`` order's 95% interval (``dnll <= dnll_hi``) / its mean recall reaches the
    ``effects`` order's lower bound; ``max_share_clean_recall``: the largest share up to which the recall stays at or
    above the clean model's."""
    rows = []
    for model, d in c.groupby("model", sort=False):
        g = d.groupby(["order", "share"]).mean(numeric_only=True).reset_index()
        eff = g[g["order"] == "effects"].set_index("share")
        clean = float(g[g["share"] == 0]["recall"].iloc[0])
        kind = kinds.get(model, "GQA")
        duo = DUO_STREAMED["MHA" if kind == "MHA" else "GQA"]
        for order, o in g.groupby("order", sort=False):
            o = o.set_index("share").sort_index()

            def reach(ok, measured) -> float:
                if not measured.notna().any():
                    return np.nan
                last = 0.0
                for share, good in ok.items():
                    if not good:
                        break
                    last = share
                return float(last)

            at = o.loc[duo] if duo in o.index else None
            rows.append({"model": model, "order": order, "attention": kind, "duo_streamed_share": duo,
                         "dnll_at_duo": float(at["dnll"]) if at is not None else np.nan,
                         "recall_at_duo": float(at["recall"]) if at is not None else np.nan,
                         "kv_saved_at_duo": float(at["kv_saved"]) if at is not None else np.nan,
                         "max_share_effects_loss": reach(o["dnll"] <= eff["dnll_hi"].reindex(o.index) + 1e-12, o["dnll"]),
                         "max_share_effects_recall": reach(o["recall"] >= eff["recall_lo"].reindex(o.index) - 1e-12, o["recall"]),
                         "max_share_clean_recall": reach(o["recall"] >= clean - 1e-12, o["recall"]),
                         "clean_recall": clean, "clean_nll": float(o["clean_nll"].iloc[0])})
    return pd.DataFrame(rows)


def figure(c: pd.DataFrame):
    """Per model: dNLL (top) and NIAH recall (bottom) against the streamed share of kv heads, one line per order
    (random: mean of the draws), 95% intervals as error bars."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    models = list(dict.fromkeys(c["model"]))

    def title(m: str) -> str:  # the lengths differ between models: name them over each column
        d = c[c["model"] == m]
        said = [f"{what} {int(d[col].max())} tokens" for what, col in (("loss", "loss_tokens"), ("needles", "niah_length"))
                if d[col].notna().any()]
        return f"{m}<br>{', '.join(said)}" if said else m

    fig = make_subplots(rows=2, cols=len(models), subplot_titles=[title(m) for m in models], shared_xaxes=True)
    colours = {"geometric": "#0072B2", "effects": "#000000", "distant_mass": "#009E73", "kvpress": "#D55E00",
               "random": "#999999"}
    for col, m in enumerate(models, start=1):
        d = c[c["model"] == m]
        for order, colour in colours.items():
            g = d[d["order"] == order].groupby("share").mean(numeric_only=True).reset_index()
            for row, y in ((1, "dnll"), (2, "recall")):
                fig.add_trace(go.Scatter(x=g["share"], y=g[y], mode="lines+markers", name=order, line=dict(color=colour),
                                         legendgroup=order, showlegend=row == 1 and col == 1,
                                         error_y=dict(type="data", symmetric=False, array=g[f"{y}_hi"] - g[y],
                                                      arrayminus=g[y] - g[f"{y}_lo"], thickness=0.6, width=2)),
                              row=row, col=col)
    fig.update_xaxes(title_text="share of kv heads streamed (sink 4 + window 64)", row=2)
    fig.update_yaxes(title_text="dNLL (nats / token)", row=1, col=1)
    fig.update_yaxes(title_text="NIAH recall", row=2, col=1)
    fig.update_layout(height=640, width=380 * len(models) + 120, title="Quality at a KV budget: which heads can stream")
    return fig


def main(argv: list[str] | None = None) -> pd.DataFrame:
    ap = parser(__doc__, "tiny-llama, 2 x 96 tokens, one needle at 256 tokens (seconds)")
    ap.add_argument("--prompts", type=int, default=4, help="pydoc prompts of the scan")
    ap.add_argument("--tokens", type=int, default=1024, help="tokens per scanned prompt")
    ap.add_argument("--loss-prompts", type=int, default=4, help="held-out pydoc prompts of the loss curves")
    ap.add_argument("--loss-tokens", type=int, default=1024, help="tokens per held-out prompt")
    ap.add_argument("--niah-length", type=int, default=512, help="needle-in-a-haystack prompt length (tokens)")
    ap.add_argument("--depths", type=float, nargs="+", default=[0.1, 0.5, 0.9], help="needle depths")
    ap.add_argument("--needles", type=int, default=2, help="needles per depth")
    ap.add_argument("--draws", type=int, default=3, help="random orders")
    ap.add_argument("--niah-draws", type=int, default=3, help="random orders that also run the NIAH trials")
    ap.add_argument("--batch-rows", type=int, default=None, help="rows per forward of the loss curves")
    ap.add_argument("--no-curves", action="store_true", help="only the validation tables")
    ap.add_argument("--parts", nargs="+", choices=["loss", "niah"], default=["loss", "niah"],
                    help="which curves to measure (runs of one part each join with --merge-from)")
    ap.add_argument("--summary-only", action="store_true", help="only kv_budget_summary.csv, from the committed curves")
    ap.add_argument("--merge-from", type=Path, nargs="+", default=[], help="run folders whose tables join --out's (their "
                    "models' rows replace --out's), then the summary")
    args = ap.parse_args(argv)
    if args.merge_from:
        merge_sources(list(TABLES), args.merge_from)
        for name in TABLES:
            parts = [pd.read_csv(d / name) for d in args.merge_from if (d / name).exists()]
            if parts:
                df = pd.concat(parts)
                if name == "kv_budget_curves.csv":
                    df = join_parts(df)
                else:  # folders that reused a scan hold the same rows: once each
                    df = df.drop_duplicates(["model", "layer", "head"] if "head" in df else ["model"], keep="last")
                write_rows(df, args.out / name)
        args.summary_only = True
    if args.summary_only:
        if not (args.out / "kv_budget_curves.csv").exists():
            print(f"no {args.out / 'kv_budget_curves.csv'} yet: no summary")
            return pd.DataFrame()
        c, h = pd.read_csv(args.out / "kv_budget_curves.csv"), pd.read_csv(args.out / "kv_budget_heads.csv")
        kinds = {m: ("MHA" if g["kv_head"].max() == g["head"].max() else "MQA" if g["kv_head"].max() == 0 else "GQA")
                 for m, g in h.groupby("model")}
        save_figure(figure(c), args.out, "kv_budget_curves")
        return write_rows(summary(c, kinds), args.out / "kv_budget_summary.csv")
    if args.quick:
        args.prompts, args.tokens, args.loss_prompts, args.loss_tokens = 2, 96, 2, 96
        args.niah_length, args.depths, args.needles, args.draws = 256, [0.5], 1, 2
    import interp
    from interp.engine import ScanConfig

    heads, vals, curve, kinds = [], [], [], {}
    for name in run_models(args):
        model = load_cpu(name)
        eff, _ = effects_table(name, args.out, ("streaming",), 2, 96, model=model) if args.quick else \
            effects_table(name, args.out, ("streaming",), args.prompts, args.tokens, model=model)
        t = reused_heads(args, name)
        if t is None:
            p = interp.corpus.prompts(model, "pydoc", args.prompts, args.tokens)
            print(f"{name}: scan of {args.prompts} x {args.tokens} pydoc tokens (shape, kv_budget)", flush=True)
            res = interp.scan(model, p, ScanConfig(shape=True, kv_budget=True))
            cols = ["layer", "head", "kv_head", "distant_mass", "geo_distant_mass", "geo0_distant_mass", "kvpress_score",
                    "slash_score", "slash_delta", "geo_slash_score", "geo_slash_delta", "ashape_coverage", "vs_coverage"]
            e = eff[eff["intervention"] == "streaming"][["layer", "head", "dnll", "dnll_lo", "dnll_hi", "prompts", "tokens"]]
            t = res.heads[cols].merge(e.rename(columns={"prompts": "effects_prompts", "tokens": "effects_tokens"}),
                                      on=["layer", "head"])
            t = t.assign(model=name, scan_prompts=args.prompts, scan_tokens=args.tokens)
        else:
            print(f"{name}: scan rows of {args.out / 'kv_budget_heads.csv'} reused ({args.prompts} x {args.tokens})", flush=True)
        e = t.rename(columns={"effects_prompts": "prompts", "effects_tokens": "tokens"})
        heads.append(t)
        vals.append(validation(name, t, model.card, args.draws) | {"scan_prompts": args.prompts, "scan_tokens": args.tokens,
                                                                    "effects_prompts": int(e["prompts"].iloc[0]),
                                                                    "effects_tokens": int(e["tokens"].iloc[0])})
        print(pd.DataFrame(vals[-1:]).T.to_string(), flush=True)
        write_rows(pd.concat(heads), args.out / "kv_budget_heads.csv")
        write_rows(pd.DataFrame(vals), args.out / "kv_budget_validation.csv")
        if not args.no_curves:
            curve.append(curves(name, model, t, args))
            c = write_rows(pd.concat(curve), args.out / "kv_budget_curves.csv")
            kinds[name] = attention_kind(model.card)
            write_rows(summary(c[c["model"].isin(kinds)], kinds), args.out / "kv_budget_summary.csv")
            save_figure(figure(c), args.out, "kv_budget_curves")
            print(curve[-1].groupby(["order", "share"])[["dnll", "recall", "kv_saved"]].mean().to_string(), flush=True)
    return pd.DataFrame(vals)


if __name__ == "__main__":
    main()
