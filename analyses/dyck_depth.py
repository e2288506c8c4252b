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

with greedy and sampled (temperature 1) decoding restricted to the two brackets; accuracy = the fraction
of completions to 32 characters that are balanced (002 Sec. 4.2). The closed forms of Thm 4.1 (trained on
one depth-4 word) and Claim 5.3 (no positions) are scored the same way. The counting-head detector
(``interp.lab.counting``) runs on every trained model and on the same model at initialisation.
Writes ``dyck.csv`` (``model, pe, train_depth, test_set, decoding, accuracy, n, train_words, final_loss``),
``dyck_counting.csv`` (per head: ``uniformity, r2, score``, at init and trained)
and ``dyck.{html,png}``.

    python analyses/dyck_depth.py [--steps 1000] [--pes learned rope nope] [--depths 8 4] [--pool 1000] [--seed 0] [--quick] [--out DIR]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import one_thread, parser, save_figure  # noqa: E402
from interp.lab import LabConfig, LabForCausalLM, TrainConfig, lab_loaded, train_model  # noqa: E402
from interp.lab import counting, dyck  # noqa: E402
from interp.lab import dyck_closed_form as cf  # noqa: E402

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


def figure(df: pd.DataFrame, cnt: pd.DataFrame) -> go.Figure:
    fig = make_subplots(rows=1, cols=3, subplot_titles=["greedy completion accuracy", "sampled completion accuracy",
                                                        "counting-head score (mean over the heads of a layer)"])
    colors = dict(zip(TEST_SETS, ["#2ca02c", "#1f77b4", "#d62728", "#9467bd", "#888888"]))
    df = df.assign(label=df.model.where(df.model.str.startswith("closed-form"), df.model + " q<=" + df.train_depth.astype(str)))
    for k, dec in enumerate(("greedy", "sampled")):
        d = df[df.decoding == dec]
        for t in TEST_SETS:
            e = d[d.test_set == t]
            fig.add_trace(go.Bar(x=e.label, y=e.accuracy, name=t, marker_color=colors[t], showlegend=k == 0), 1, k + 1)
    if len(cnt):
        mean = cnt.groupby(["model", "train_depth", "state", "layer"], sort=False).score.mean().reset_index()
        for state, color in (("init", "#bbbbbb"), ("trained", "#444444")):
            e = mean[mean.state == state]
            x = e.model + " q<=" + e.train_depth.astype(str) + " L" + e.layer.astype(str)
            fig.add_trace(go.Bar(x=x, y=e.score, name=f"counting ({state})", marker_color=color), 1, 3)
    fig.update_yaxes(range=[0, 1.05])
    fig.update_layout(barmode="group", height=560, width=1500,
                      title="Dyck D_32 depth extrapolation (002 Sec. 4.2): prefixes cut at the first maximum")
    return fig


def main(argv: list[str] | None = None) -> pd.DataFrame:
    ap = parser(__doc__, "one tiny learned-PE model, 30 steps, 64 test prefixes")
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--pes", nargs="+", default=["learned", "rope", "nope"])
    ap.add_argument("--depths", nargs="+", type=int, default=[8, 4])
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--d-model", type=int, default=64)
    ap.add_argument("--pool", type=int, default=1000,
                    help="also train learned-PE models on this many distinct words (002 Fig. 3 right); 0: skip")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    with one_thread():  # tiny tensors: a second thread only waits on the busy shared cores
        return run(args)


def run(args) -> pd.DataFrame:
    """The experiment behind ``main`` (``args`` from its parser)."""
    if args.quick:
        args.steps, args.pes, args.depths, args.d_model, args.pool = 30, ["learned"], [8], 32, 0
    m = 64 if args.quick else 1024
    args.out.mkdir(parents=True, exist_ok=True)
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
    probe_steps = torch.cat([torch.zeros(len(probe), 1), 1 - 2 * torch.as_tensor(probe, dtype=torch.float64)], 1)
    runs = [(pe, q, 0) for pe in args.pes for q in args.depths]
    runs += [("learned", q, args.pool) for q in args.depths if args.pool]
    for pe, q, pool in runs:
        t0 = time.perf_counter()
        label = pe if not pool else f"{pe}, {pool} words"
        torch.manual_seed(args.seed)
        cfg = LabConfig(vocab_size=len(VOCAB), n_layers=args.layers, n_heads=4, d_model=args.d_model,
                        d_mlp=4 * args.d_model, pe=pe, max_positions=64)
        model = LabForCausalLM(cfg)
        det = counting.detect(lab_loaded(model, VOCAB, name=f"dyck-{pe}-init"), probe_ids, probe_steps)
        counts.append(det.assign(model=label, train_depth=q, state="init"))
        words = dyck.sample(N, range(1, q + 1), pool, np.random.default_rng(args.seed + 2), distinct=True) if pool else None
        losses = train_model(model, batch_fn(range(1, q + 1), args.batch, words),
                             TrainConfig(steps=args.steps, lr=1e-3, warmup=min(200, args.steps // 10), seed=args.seed,
                                         weight_decay=0.01))
        det = counting.detect(lab_loaded(model, VOCAB, name=f"dyck-{pe}-q{q}"), probe_ids, probe_steps)
        counts.append(det.assign(model=label, train_depth=q, state="trained"))
        sets = {"depth<=q": in_dist[q], **common}
        if pool:  # 002 Fig. 3's dashed lines: prefixes of the training words themselves
            sets["train words"] = tuple(x[:m] for x in dyck.unique_prefixes(*dyck.cut_at_max(words)))
        res = evaluate(cf.lab_policy(model, VOCAB, bos=True), sets, args.seed)
        loss = float(np.mean(losses[-50:]))
        seen = pool if pool else args.steps * args.batch
        rows += [dict(model=label, pe=pe, train_depth=q, **r, train_words=seen, final_loss=loss) for r in res]
        layer0 = det[det.layer == 0].score
        print(f"{label} q<={q}: loss {loss:.4f} (entropy floor {np.log(dyck.count(N, range(1, q + 1))) / N:.4f}), "
              f"counting score layer 0 mean {layer0.mean():.3f}, {time.perf_counter() - t0:.0f} s", flush=True)
    df = pd.DataFrame(rows)
    cnt = pd.concat(counts, ignore_index=True) if counts else pd.DataFrame()
    df.to_csv(args.out / "dyck.csv", index=False)
    if len(cnt):
        cnt = cnt[["model", "train_depth", "state", "layer", "head", "uniformity", "r2", "score"]]
        cnt.to_csv(args.out / "dyck_counting.csv", index=False)
    save_figure(figure(df, cnt), args.out, "dyck")
    with pd.option_context("display.width", 200, "display.max_rows", 200):
        print(df.pivot_table(index=["model", "train_depth", "decoding"], columns="test_set", values="accuracy",
                             sort=False).round(3).to_string())
        if len(cnt):
            summ = cnt.groupby(["model", "train_depth", "state", "layer"], sort=False).agg(
                mean_score=("score", "mean"), min_score=("score", "min"), heads_over_0_9=("score", lambda x: int((x > 0.9).sum())))
            print(summ.round(3).to_string())
    return df


if __name__ == "__main__":
    main()
