"""Depth extrapolation on Dyck words (paper 002, Sec. 4.2, Table 1): trained decoders against the closed forms.

Words of ``D_32`` (balanced, 32 brackets), depth = maximum prefix sum. Small lab decoders
(``interp.lab.LabForCausalLM``: learned absolute positions, the paper's setting; RoPE and NoPE as our
extension) are trained on fresh words drawn exactly uniformly (``interp.lab.dyck.sample``) from depth <= 8
and from depth <= 4 (``--pool``: learned-PE models also on a fixed set of 1,000 distinct words, the small
training sets of 002 Fig. 3 right), then complete prefixes cut right after the word first reaches its
maximum depth:

- ``depth<=q``: 1024 distinct prefixes of fresh words of the training depths (in distribution);
- ``depth>=9``: 1024 distinct prefixes of words of depth 9..16 (002 Sec. 4.2, Fig. 3 left);
- ``depth>=13``: all 763 distinct prefixes of the 4,000 words of depth >= 13 (enumerated; 002 Fig. 3 right);
- ``all-open16``: the prefix of 16 ``'('`` (002 Table 1; sampled: 100 trials);
- ``train words`` (``--pool`` models only): distinct prefixes of the training words (002 Fig. 3's in-sample lines);

with sampled decoding (temperature 1, the paper's ``generate``: the headline) and greedy decoding beside it,
restricted to the two brackets; accuracy = the fraction of completions to 32 characters that are balanced
(002 Sec. 4.2). The closed forms of Thm 4.1 (trained on one depth-4 word) and Claim 5.3 (no positions) are
scored the same way. Every trained configuration runs for each seed of ``--seeds`` (model initialisation and
training words; the test prefixes are the same for all). 002 Fig. 3 left: learned-PE models of widths
``--widths`` (and ``--d-model``) trained on depth <= 8, scored on the same sets. The counting-head detector
(``interp.lab.counting``: ``shape`` = uniformity x R^2, ``use`` = share of the model's forced-bracket accuracy
above a position-only rule lost when the head alone is mean-ablated, ``score`` = shape x use) runs on every
trained model and on the same model at initialisation. Models train in ``--jobs`` worker processes.
Writes ``dyck.csv`` (``model, pe, train_depth, test_set, decoding, accuracy, n, train_words, final_loss, seed,
width``), ``dyck_counting.csv`` (per head, at init and trained: ``uniformity, r2, shape, acc, acc_ablated, blind,
use, score``), ``dyck_layer_ablation.csv`` (its trained whole-layer rows with the derived ``delta_acc`` = accuracy
with the layer mean-ablated minus without, and ``margin`` = accuracy minus the position-only rule's ``blind``) and
``dyck.{html,png}``. ``--replot`` redraws the figure and rewrites ``dyck_layer_ablation.csv`` from the CSVs in ``--out``.

    python -m analyses.p002_dyck.dyck_depth [--steps 1000] [--pes learned rope nope] [--depths 8 4] [--pool 1000]
        [--seeds 0 1 2] [--widths 2 8 32 128] [--jobs 2] [--quick] [--out DIR]
"""

from __future__ import annotations

import multiprocessing as mp
import time
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots

from interp.lab import LabConfig, LabForCausalLM, TrainConfig, lab_loaded, train_model
from interp.lab import counting, dyck
from interp.lab import dyck_closed_form as cf

from analyses._common import one_thread, parser, save_figure

N = 32
VOCAB = cf.VOCAB  # <pad> <bos> <unk> ( )
TEST_SETS = ["depth<=q", "depth>=9", "depth>=13", "all-open16", "train words"]
TRIALS = 100      # sampled completions of the all-open prefix (002 Table 1)


def test_prefixes(rng: np.random.Generator, depths, m: int) -> tuple[np.ndarray, np.ndarray]:
    """Up to ``m`` distinct cut prefixes of words drawn uniformly from ``depths`` (exact sampler)."""
    words = dyck.sample(N, depths, 8 * m, rng)
    c, l = dyck.unique_prefixes(*dyck.cut_at_max(words))
    return c[:m], l[:m]


def batch_fn(depths, batch: int, pool: np.ndarray | None = None):
    """Training batches: ``<bos>`` + 32 brackets, every bracket a target. Words are fresh exactly-uniform draws from
    the training depths, or (``pool [m, 32]``) drawn with replacement from a fixed set of distinct words."""
    ids = torch.tensor([VOCAB.id("("), VOCAB.id(")")])

    def fn(step: int, rng: np.random.Generator) -> dict:
        w = dyck.sample(N, depths, batch, rng) if pool is None else pool[rng.integers(0, len(pool), batch)]
        x = torch.cat([torch.full((batch, 1), VOCAB.id("<bos>")), ids[torch.as_tensor(w, dtype=torch.long)]], 1)
        mask = torch.ones_like(x, dtype=torch.bool)
        mask[:, 0] = False
        return {"input_ids": x, "loss_mask": mask}
    return fn


def evaluate(policy, sets: dict, seed: int) -> list[dict]:
    """Greedy and sampled accuracy of one policy on every test set (the all-open prefix: ``TRIALS`` samples)."""
    rows = []
    for name, (c, l) in sets.items():
        for greedy in (True, False):
            cc, ll = (np.repeat(c, TRIALS, 0), np.repeat(l, TRIALS)) if name == "all-open16" and not greedy else (c, l)
            g = torch.Generator().manual_seed(seed)
            acc = dyck.completion_accuracy(policy, cc, ll, greedy=greedy, generator=g)
            rows.append(dict(test_set=name, decoding="greedy" if greedy else "sampled", accuracy=acc, n=len(ll)))
    return rows


def heads_for(width: int) -> int:
    """Heads per layer at a width: 4 (d >= 16), 2 (d = 8: heads of 4), 1 (d = 2: one head of 2)."""
    return 4 if width >= 16 else (2 if width >= 4 else 1)


def figure(df: pd.DataFrame, cnt: pd.DataFrame, d_model: int) -> go.Figure:
    """Sampled (headline) and greedy accuracy per model (mean over seeds, seeds as points), width sweep, counting scores."""
    fig = make_subplots(rows=1, cols=4, subplot_titles=["sampled completion accuracy (002's protocol)", "greedy completion accuracy",
                                                        "002 Fig. 3 left: width d, learned PE, depth <= 8", "counting-head score (max per model)"])
    colors = dict(zip(TEST_SETS, ["#2ca02c", "#1f77b4", "#d62728", "#9467bd", "#888888"]))
    main = df[df.width.isna() | (df.width == d_model)]
    main = main.assign(label=main.model.where(main.model.str.startswith("closed-form"), main.model + " q<=" + main.train_depth.astype(str)))
    for k, dec in enumerate(("sampled", "greedy")):
        d = main[main.decoding == dec]
        for t in TEST_SETS:
            e = d[d.test_set == t]
            m = e.groupby("label", sort=False).accuracy.mean()
            fig.add_trace(go.Bar(x=m.index, y=m.values, name=t, marker_color=colors[t], legendgroup=t, showlegend=k == 0), 1, k + 1)
    wd = df[(df.pe == "learned") & (df.train_depth == 8) & ~df.model.str.contains("words") & df.width.notna()]
    for t in ("depth>=9", "depth>=13"):
        for dec, dash in (("sampled", "solid"), ("greedy", "dot")):
            e = wd[(wd.test_set == t) & (wd.decoding == dec)].groupby("width").accuracy.agg(["mean", "min", "max"]).reset_index()
            fig.add_trace(go.Scatter(x=e.width, y=e["mean"], mode="lines+markers", name=f"{t}, {dec}", line=dict(color=colors[t], dash=dash),
                                     error_y=dict(type="data", symmetric=False, array=e["max"] - e["mean"], arrayminus=e["mean"] - e["min"])), 1, 3)
    fig.update_xaxes(type="log", title="width d (d_model)", row=1, col=3)
    if len(cnt):
        best = cnt.groupby(["model", "train_depth", "width", "seed", "state"], sort=False).score.max().reset_index()
        for state, color in (("init", "#bbbbbb"), ("trained", "#444444")):
            e = best[best.state == state]
            x = e.model + " q<=" + e.train_depth.astype(str) + " d" + e.width.astype(int).astype(str) + " s" + e.seed.astype(str)
            fig.add_trace(go.Bar(x=x, y=e.score, name=f"counting score ({state})", marker_color=color), 1, 4)
    fig.update_yaxes(range=[0, 1.05])
    fig.update_layout(barmode="group", height=600, width=2000,
                      title="Dyck D_32 depth extrapolation (002 Sec. 4.2): prefixes cut at the first maximum; bars: mean over seeds")
    return fig


def main(argv: list[str] | None = None) -> pd.DataFrame:
    ap = parser(__doc__, "one tiny learned-PE model, 30 steps, 64 test prefixes")
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--pes", nargs="+", default=["learned", "rope", "nope"])
    ap.add_argument("--depths", nargs="+", type=int, default=[8, 4])
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--d-model", type=int, default=64)
    ap.add_argument("--widths", nargs="*", type=int, default=[2, 8, 32, 128],
                    help="002 Fig. 3 left: also learned-PE models of these widths on depth <= 8 (besides --d-model)")
    ap.add_argument("--pool", type=int, default=1000,
                    help="also train learned-PE models on this many distinct words (002 Fig. 3 right); 0: skip")
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--seed", type=int, default=0, help="seed of the test prefixes and the closed forms' training word")
    ap.add_argument("--m", type=int, default=1024, help="test prefixes per set (002: 1024)")
    ap.add_argument("--jobs", type=int, default=2, help="worker processes (one torch thread each); 1: in this process")
    ap.add_argument("--replot", action="store_true", help="only redraw dyck.{html,png} and rewrite dyck_layer_ablation.csv from the CSVs in --out (e.g. of a stopped run)")
    args = ap.parse_args(argv)
    if args.replot:
        df, cnt = pd.read_csv(args.out / "dyck.csv"), pd.read_csv(args.out / "dyck_counting.csv")
        save_figure(figure(df, cnt, args.d_model), args.out, "dyck")
        layer_ablation(cnt).round(4).to_csv(args.out / "dyck_layer_ablation.csv", index=False)
        return df
    with one_thread():  # tiny tensors: a second thread only waits on the busy shared cores
        return run(args)


def train_one(job: tuple) -> tuple[list[dict], list[pd.DataFrame], str]:
    """Train one configuration and score it (runs in a worker process): csv rows, counting frames, a log line."""
    (label, pe, q, pool, seed, width), args, sets, probe_ids, probe_steps = job
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    torch.manual_seed(seed)
    cfg = LabConfig(vocab_size=len(VOCAB), n_layers=args.layers, n_heads=heads_for(width), d_model=width,
                    d_mlp=4 * width, pe=pe, max_positions=64)
    model = LabForCausalLM(cfg)
    tag = dict(model=label, train_depth=q, seed=seed, width=width)
    counts = [counting.detect(lab_loaded(model, VOCAB, name=f"dyck-{pe}-init"), probe_ids, probe_steps).assign(state="init", **tag)]
    words = dyck.sample(N, range(1, q + 1), pool, np.random.default_rng([seed, 2]), distinct=True) if pool else None
    losses = train_model(model, batch_fn(range(1, q + 1), args.batch, words),
                         TrainConfig(steps=args.steps, lr=1e-3, warmup=min(200, args.steps // 10), seed=seed, weight_decay=0.01))
    det = counting.detect(lab_loaded(model, VOCAB, name=f"dyck-{pe}-q{q}"), probe_ids, probe_steps)
    counts.append(det.assign(state="trained", **tag))
    sets = dict(sets)
    if pool:  # 002 Fig. 3's dashed lines: prefixes of the training words themselves
        m = len(sets["depth>=9"][1])
        sets["train words"] = tuple(x[:m] for x in dyck.unique_prefixes(*dyck.cut_at_max(words)))
    res = evaluate(cf.lab_policy(model, VOCAB, bos=True), sets, seed)
    loss = float(np.mean(losses[-50:]))
    seen = pool if pool else args.steps * args.batch
    rows = [dict(model=label, pe=pe, train_depth=q, **r, train_words=seen, final_loss=loss, seed=seed, width=width) for r in res]
    acc = {(r["test_set"], r["decoding"]): r["accuracy"] for r in res}
    line = (f"{label} q<={q} d{width} seed {seed}: loss {loss:.4f} (entropy floor {np.log(dyck.count(N, range(1, q + 1))) / N:.4f}), "
            f">=13 sampled {acc[('depth>=13', 'sampled')]:.3f} greedy {acc[('depth>=13', 'greedy')]:.3f}, "
            f"counting score max init {counts[0].score.max():.2f} trained {det.score.max():.2f}, {time.perf_counter() - t0:.0f} s")
    return rows, counts, line


def layer_ablation(cnt: pd.DataFrame) -> pd.DataFrame:
    """Trained models' whole-layer rows (``head == -1``) of ``dyck_counting.csv`` with ``delta_acc = acc_ablated - acc``
    (what mean-ablating the layer does to forced-bracket accuracy) and ``margin = acc - blind`` (over the
    position-only rule; ``use`` needs >= 0.05)."""
    t = cnt[(cnt["state"] == "trained") & (cnt["head"] == -1)]
    t = t.assign(delta_acc=t["acc_ablated"] - t["acc"], margin=t["acc"] - t["blind"])
    return t[["model", "train_depth", "width", "seed", "layer", "acc", "acc_ablated", "delta_acc", "blind", "margin", "shape", "use",
              "score"]].reset_index(drop=True)


def write_tables(closed: list[dict], done: list[tuple], out: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Write ``dyck.csv`` and ``dyck_counting.csv`` from the closed-form rows and the finished models (sorted)."""
    df = pd.DataFrame(closed + [row for r, _, _ in done for row in r])
    for col in ("train_words", "final_loss", "seed", "width"):
        if col not in df:
            df[col] = np.nan
    df = df[["model", "pe", "train_depth", "test_set", "decoding", "accuracy", "n", "train_words", "final_loss", "seed", "width"]]
    df = df.sort_values(["seed", "width", "model", "train_depth"], ascending=[True, False, True, False], na_position="first",
                        kind="stable").reset_index(drop=True)
    df.to_csv(out / "dyck.csv", index=False)
    frames = [f for _, c, _ in done for f in c]
    cnt = pd.DataFrame()
    if frames:
        cnt = pd.concat(frames, ignore_index=True)[["model", "train_depth", "width", "seed", "state", "layer", "head", "uniformity",
                                                    "r2", "shape", "acc", "acc_ablated", "blind", "use", "score"]]
        cnt = cnt.sort_values(["seed", "width", "model", "train_depth"], ascending=[True, False, True, False], kind="stable")
        cnt.to_csv(out / "dyck_counting.csv", index=False)
        layer_ablation(cnt).round(4).to_csv(out / "dyck_layer_ablation.csv", index=False)
    return df, cnt


def run(args) -> pd.DataFrame:
    """The experiment behind ``main`` (``args`` from its parser)."""
    if args.quick:
        args.steps, args.pes, args.depths, args.d_model, args.pool, args.seeds, args.widths, args.jobs = 30, ["learned"], [8], 32, 0, [0], [8], 1
    m = 64 if args.quick else args.m
    args.out.mkdir(parents=True, exist_ok=True)
    t_all = time.perf_counter()
    rng = np.random.default_rng(args.seed)
    deep = dyck.unique_prefixes(*dyck.cut_at_max(dyck.enumerate_words(N, range(13, N // 2 + 1))))
    common = {"depth>=9": test_prefixes(rng, range(9, N // 2 + 1), m),
              "depth>=13": (deep[0][:m], deep[1][:m]) if args.quick else deep,
              "all-open16": (np.zeros((1, N), np.uint8), np.array([16]))}
    in_dist = {q: test_prefixes(rng, range(1, q + 1), m) for q in sorted({4, 8, *args.depths})}
    rows, counts = [], []

    s = dyck.sample(N, [4], 1, rng)[0]  # Thm 4.1's single training word (a real depth-4 word of D_32)
    for name, q, pol in (("closed-form Thm 4.1", 4, cf.thm41_policy(s)), ("closed-form Claim 5.3", 0, cf.claim53_policy(N))):
        sets = {"depth<=q": in_dist[8], **common}  # in distribution of the q <= 8 models
        rows += [dict(model=name, pe="learned" if q else "nope", train_depth=q, **r) for r in evaluate(pol, sets, args.seed)]
    print(f"closed forms: Thm 4.1 trained on {dyck.to_strings([s])[0]}", flush=True)

    probe = dyck.sample(N, range(1, 9), 64 if args.quick else 256, np.random.default_rng(args.seed + 1))
    probe_ids = torch.cat([torch.full((len(probe), 1), VOCAB.id("<bos>")), torch.as_tensor(probe, dtype=torch.long) + 3], 1)
    probe_steps = torch.cat([torch.zeros(len(probe), 1, dtype=torch.long), 1 - 2 * torch.as_tensor(probe, dtype=torch.long)], 1)
    runs = [(pe, pe, q, 0, seed, args.d_model) for seed in args.seeds for pe in args.pes for q in args.depths]
    runs += [(f"learned, {args.pool} words", "learned", q, args.pool, seed, args.d_model) for seed in args.seeds for q in args.depths if args.pool]
    runs += [("learned", "learned", 8, 0, seed, w) for seed in args.seeds for w in args.widths if w != args.d_model]
    work = [(r, args, {"depth<=q": in_dist[r[2]], **common}, probe_ids, probe_steps) for r in runs]
    work.sort(key=lambda w: (w[0][4], w[0][5]))  # seed by seed; narrowest (cheapest) first within a seed
    closed = list(rows)
    done: list[tuple] = []
    if args.jobs > 1:
        with mp.get_context("fork").Pool(args.jobs) as pool:
            for res in pool.imap_unordered(train_one, work, chunksize=1):
                done.append(res)
                print(res[2], flush=True)
                df, cnt = write_tables(closed, done, args.out)  # after every model: a stopped run keeps what it finished
    else:
        for w in work:
            done.append(train_one(w))
            print(done[-1][2], flush=True)
            df, cnt = write_tables(closed, done, args.out)
    save_figure(figure(df, cnt, args.d_model), args.out, "dyck")
    with pd.option_context("display.width", 250, "display.max_rows", 400):
        tab = df.assign(width=df.width.fillna(0).astype(int))
        print(tab.pivot_table(index=["model", "train_depth", "width", "decoding"], columns="test_set", values="accuracy",
                              aggfunc=["mean", "min", "max"], sort=False).round(3).to_string())
        if len(cnt):
            summ = cnt.groupby(["model", "train_depth", "width", "state"], sort=False).agg(
                max_score=("score", "max"), max_shape=("shape", "max"), max_use=("use", "max"), acc=("acc", "mean"))
            print(summ.round(3).to_string())
    print(f"total {time.perf_counter() - t_all:.0f} s ({args.jobs} worker process(es), one torch thread each)", flush=True)
    return df


if __name__ == "__main__":
    main()
