"""Paper 000's copy experiment at lab scale: 1-layer 2D-RoPE against 1- and 2-layer RoPE, NoPE and ALiBi copiers.

000 Sec. 3.4.2 / 4.2 and App. D (Figs. 3, 6, 7): train on Imbalanced binary strings (``s <\\n> <O:> s <EOS>``,
loss on the copy and EOS), test whole-string exact match (teacher forced: every argmax of the copy and EOS
right) on Uniform, Imbalanced and Recursive-Flip strings in length bins up to 20x the training length.
Expected (000): 2D-RoPE copies far beyond the training length; standard encodings copy in range when trained
long enough ("almost perfectly", Sec. 3.4.2) but fail beyond it; no 1-layer shift-invariant model copies
every string of length <= 5 (Thm 3.1). Fig. 7: trained on Uniform, models copy Uniform but not Imbalanced.

Models (000: 1 layer x 2 heads of width 512 for 60k steps, 12 layers for 30k, batch 256, lengths 1..100, 8 seeds):

- 2D-RoPE, 1 layer, one head of width 128 (32 row + 32 column planes, base 100 as 000 Sec. 4.1), 600 steps on
  lengths 1..64, no curriculum (it copies at 20x with this);
- baselines RoPE (base 1e4), NoPE and ALiBi with 1 and 2 layers, 4 heads of width 32, trained with a length
  curriculum (``interp.lab.copy_task.LengthCurriculum``: lengths 1..hi, hi from 8 up to 64, raised by 1.5x
  whenever the training batches of the last 50 steps reach 0.9 exact match; 000 has no curriculum), peak lr 2e-3;
  the 2-layer RoPE copier on Imbalanced strings uses ``ROPE2_RECIPE`` (``analyses/p000_copy/copy_attempts.py``'s ``fast``:
  RoPE base 500, the curriculum moves on at 0.8) for 2,000 steps;
- the same baselines (and the Uniform-trained 2-layer RoPE model) with recipe ``wide_long`` (``WIDE``: 8 heads of 32,
  d_model 256, MLP 256, peak lr 1e-3, 4,000 steps; the recipe with which the 2-layer RoPE copier learns 1-64); the
  width-128 models above keep their rows under their recipe names (``base``, ``fast``) in the tables;
- 000 Fig. 7: the 2D-RoPE and the 2-layer RoPE models also trained on Uniform strings.

All: SwiGLU MLP 128, d_model 128, batch 32, AdamW (betas (0.9, 0.95), weight decay 0.01, warmup 100, cosine to
0.1 x peak, 000 App. D), seed ``--seed``. Models train in ``--jobs`` worker processes (one torch thread each).
Test strings per bin (the same for every model): 200 (1-64), 200 (1-16), 100 (65-96), 100 (120-128),
50 (600-640), 50 (1200-1280).

``--seeds`` trains every model once per seed (test strings seeded by the seed too); ``--only`` trains some models
(``pe-layers-train[-recipe]``, e.g. ``rope-2-imbalanced-wide_long``) and replaces their rows for those seeds in the
existing tables; ``--merge-from DIR ...`` joins runs made in separate processes (one ``--out`` folder each).

Writes ``copy.csv`` (``pe, layers, distribution, length_lo, length_hi, exact_match, seed, train_distribution,
steps, final_hi``), ``copy_summary.csv`` (over seeds: ``seeds, mean, sd, min, max`` per model, distribution and
bin), ``copy_loss.csv`` (training curves per seed and ``recipe``: mean loss and batch exact match per 10 steps, the
curriculum's hi), ``copy_attention.csv`` (``interp.lab.copy_attention`` of the 2-layer RoPE copier, trained and at
initialisation, on Imbalanced strings of 32 and 96 bits), ``copy.{html,png}``, ``copy_loss.{html,png}``,
``copy_attention.{html,png}`` (its two layers' maps on one 32-bit string), ``copy_rope2_view.html`` (the
token viewer, ``interp.report.viewer.attention_view``), the trained 2D-RoPE model (``interp.lab.save_lab``) in
``copy_2d_rope_model/`` (or ``--save-dir``), the 2-layer RoPE copier in ``copy_rope2_model/`` and its head atlas
(``copy_atlas``: ``copy_atlas.csv``, ``copy_atlas_roles.csv``, ``copy_atlas_grid.{html,png}``; ``--atlas DIR`` runs only this, on a saved copier) and ``copy_2d_rope_report.html`` (``interp.scan`` of that model).

    python -m analyses.p000_copy.copy_2d_rope [--steps-scale 1] [--seed 0 | --seeds 0 1 2] [--only MODEL ...] [--jobs 2]
        [--out figures/] [--save-dir DIR] [--merge-from DIR ...] [--quick]
    python -m analyses.p000_copy.copy_2d_rope --atlas figures/copy_rope2_model [--seed 0] [--out figures/]
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

from interp.lab import LabConfig, LabForCausalLM, TrainConfig, lab_loaded, save_lab, train_model
from interp.lab.copy_attention import copy_attention_table
from interp.lab.copy_task import (DISTRIBUTIONS, LengthCurriculum, copy_vocab, encode_batch, exact_match,
                                  sample_string, sample_strings)

from analyses._common import merge_sources, one_thread, parser, replace_rows, save_figure

# the 2-layer RoPE copier's recipe (analyses/p000_copy/copy_attempts.py): RoPE base 500, curriculum moving on at 0.8 exact match
ROPE2_RECIPE = dict(name="fast", rope_base=500.0, threshold=0.8)
# copy_attempts.py's ``wide_long``: width 256 (8 heads of 32, MLP 256), lr 1e-3, 4,000 steps; the recipe with which the
# 2-layer RoPE copier learns lengths 1-64 (1.000 / 1.000 / 0.995 in seeds 0-2), used for every baseline
WIDE = dict(name="wide_long", d_model=256, d_mlp=256)
# (pe, layers, heads, train distribution, steps, curriculum, peak lr[, recipe overrides: train_one])
FULL_MODELS = [("rope2d", 1, 1, "imbalanced", 600, False, 1e-3), ("rope", 2, 4, "imbalanced", 2000, True, 2e-3, ROPE2_RECIPE),
               ("rope", 1, 4, "imbalanced", 2000, True, 2e-3), ("nope", 1, 4, "imbalanced", 2000, True, 2e-3),
               ("alibi", 1, 4, "imbalanced", 2000, True, 2e-3), ("nope", 2, 4, "imbalanced", 3000, True, 2e-3),
               ("alibi", 2, 4, "imbalanced", 3000, True, 2e-3),
               ("rope2d", 1, 1, "uniform", 600, False, 1e-3), ("rope", 2, 4, "uniform", 3000, True, 2e-3)] + \
              [(pe, layers, 8, train, 4000, True, 1e-3, WIDE) for pe, layers, train in
               [("rope", 2, "imbalanced"), ("nope", 2, "imbalanced"), ("alibi", 2, "imbalanced"), ("rope", 1, "imbalanced"),
                ("nope", 1, "imbalanced"), ("alibi", 1, "imbalanced"), ("rope", 2, "uniform")]]
# the model whose attention maps copy_attention.* show (000 Figs. 4 / 8): the 2-layer RoPE copier that learned 1-64
ATTENTION_MODEL = "rope-2-imbalanced-wide_long"
QUICK_MODELS = [("rope2d", 1, 1, "imbalanced", 20, False, 1e-3),
                ("rope", 2, 2, "imbalanced", 20, True, 2e-3, dict(name="wide_long", d_model=64, d_mlp=64)),
                ("rope", 1, 2, "imbalanced", 20, True, 2e-3), ("rope2d", 1, 1, "uniform", 20, False, 1e-3)]
FULL = dict(d_model=128, d_mlp=128, batch=32, train_hi=64, start_hi=8,
            bins=[(1, 64, 200), (1, 16, 200), (65, 96, 100), (120, 128, 100), (600, 640, 50), (1200, 1280, 50)],
            attn_lengths=(32, 96), attn_strings=8)
QUICK = dict(d_model=32, d_mlp=32, batch=8, train_hi=8, start_hi=4, bins=[(1, 8, 6), (12, 16, 4)], attn_lengths=(6,), attn_strings=2)
ATLAS_PROMPTS = 16  # copy prompts of attn_lengths[0] Imbalanced bits in the atlas's text pass (and as many repeated-random)
ATLAS_SUPPORT = 200  # bootstrap resamples of those prompts for each head's role support (interp.experiments.atlas.role_support)
DASH = {"wide_long": "solid", "base": "dash"}  # line style per recipe (others dotted)
COLORS = {"rope2d-1": "#d62728", "rope-1": "#1f77b4", "nope-1": "#7f7f7f", "alibi-1": "#ff7f0e",
          "rope-2": "#2ca02c", "nope-2": "#17becf", "alibi-2": "#9467bd"}
COLUMNS = ["pe", "layers", "distribution", "length_lo", "length_hi", "exact_match", "seed", "train_distribution", "steps", "final_hi",
           "recipe"]
MODEL_KEYS = ["pe", "layers", "train_distribution", "recipe"]  # one trained model (with ``seed``: one run)
LOSS_COLUMNS = ["pe", "layers", "train_distribution", "seed", "recipe", "step", "loss", "batch_exact_match", "hi"]


def build(pe: str, layers: int, heads: int, s: dict, vocab, seed: int, rope_base: float | None = None) -> LabForCausalLM:
    """A lab decoder of the experiment's size: ``heads`` heads of width ``d_model / heads`` per layer.

    ``rope_base``: RoPE base theta (default 100 for ``rope2d`` as 000 Sec. 4.1, else 1e4)."""
    base = rope_base if rope_base is not None else (100.0 if pe == "rope2d" else 1e4)
    cfg = LabConfig(vocab_size=len(vocab), n_layers=layers, n_heads=heads, d_model=s["d_model"], d_mlp=s["d_mlp"], pe=pe,
                    rope_base=base, newline_ids=(vocab.id("<\\n>"),), max_positions=4096)
    torch.manual_seed(seed)
    return LabForCausalLM(cfg)


def train_one(job: tuple) -> dict:
    """Train and test one model (runs in a worker process, one torch thread): rows, curve, weights, seconds.

    ``job = (spec, s, seed, tests)``; ``spec = (pe, layers, heads, train, steps, curriculum, lr[, recipe])`` where the
    optional ``recipe`` dict overrides the sizes of ``s`` (``d_model``, ``d_mlp``, ``batch``, ``start_hi``) and the
    training (``rope_base``, ``threshold``, ``factor``, ``every``, ``warmup``, ``min_lr_frac``, ``betas``,
    ``weight_decay``), and may ask for ``eval_every`` (exact match of the ``eval`` test strings, a list of bit
    strings, every so many steps; columns ``eval_step`` / ``eval_exact_match`` of the returned ``evals``).
    """
    spec, s, seed, tests = job
    (pe, layers, heads, train, steps, curriculum, lr), r = spec[:7], (spec[7] if len(spec) > 7 else {})
    s = {**s, **{k: r[k] for k in ("d_model", "d_mlp", "batch", "start_hi") if k in r}}
    torch.set_num_threads(1)
    vocab = copy_vocab()
    model = build(pe, layers, heads, s, vocab, seed, r.get("rope_base"))
    cur = LengthCurriculum(vocab, train, 1, s["start_hi"] if curriculum else s["train_hi"], s["train_hi"], s["batch"],
                           every=r.get("every", 50), threshold=r.get("threshold", 0.9), factor=r.get("factor", 1.5))
    cfg = TrainConfig(steps=steps, lr=lr, warmup=r.get("warmup", min(100, steps // 4)), weight_decay=r.get("weight_decay", 0.01),
                      betas=tuple(r.get("betas", (0.9, 0.95))), min_lr_frac=r.get("min_lr_frac", 0.1), seed=seed,
                      log_every=500 if steps >= 1000 else 0)
    evals: list[tuple[int, float, float]] = []
    loss_fn = cur.loss_fn
    if r.get("eval_every"):
        def loss_fn(model, batch, _inner=cur.loss_fn, _t0=time.perf_counter()):
            step = len(cur.accuracy)  # steps done before this one
            if step and step % r["eval_every"] == 0:
                evals.append((step, float(exact_match(model, vocab, r["eval"]).mean()), time.perf_counter() - _t0))
                model.train()
            return _inner(model, batch)
    t0 = time.perf_counter()
    losses = train_model(model, cur.batch_fn, cfg, loss_fn=loss_fn)
    t_train = time.perf_counter() - t0
    if r.get("eval_every"):
        evals.append((steps, float(exact_match(model, vocab, r["eval"]).mean()), t_train))
    rows = [dict(pe=pe, layers=layers, distribution=dist, length_lo=lo, length_hi=hi,
                 exact_match=float(exact_match(model, vocab, strings).mean()), seed=seed, train_distribution=train,
                 steps=steps, final_hi=cur.hi, recipe=r.get("name", "base")) for (dist, lo, hi), strings in tests.items()]
    k = 10
    n = len(losses) // k * k
    curve = pd.DataFrame(dict(step=np.arange(k, n + 1, k), loss=np.asarray(losses[:n]).reshape(-1, k).mean(1),
                              batch_exact_match=np.asarray(cur.accuracy[:n]).reshape(-1, k).mean(1),
                              hi=np.asarray(cur.his[:n]).reshape(-1, k).max(1)))
    curve = curve.assign(pe=pe, layers=layers, train_distribution=train, seed=seed, recipe=r.get("name", "base"))
    return dict(key=_key(spec), seed=seed, rows=rows, curve=curve, state=model.state_dict(), config=model.config.to_dict(),
                t_train=t_train, t_eval=time.perf_counter() - t0 - t_train, final_loss=float(np.mean(losses[-50:])), final_hi=cur.hi,
                evals=pd.DataFrame(evals, columns=["eval_step", "eval_exact_match", "seconds"]))


def figure(df: pd.DataFrame, train_hi: int) -> go.Figure:
    """Exact match against the length bin (mean over seeds, bars: sd): one panel per test distribution (trained
    Imbalanced), and 000 Fig. 7."""
    keys = MODEL_KEYS + ["distribution", "length_lo", "length_hi"]
    df = _with_recipe(df).groupby(keys, sort=False).exact_match.agg(["mean", "std", "count"]).reset_index()  # over seeds
    df = df.rename(columns={"mean": "exact_match"}).assign(std=lambda d: d["std"].fillna(0.0))
    main = df[(df.train_distribution == "imbalanced") & ~((df.length_lo == 1) & (df.length_hi < train_hi))]
    titles = [f"test {d} (trained Imbalanced)" for d in DISTRIBUTIONS] + ["000 Fig. 7: trained Uniform"]
    fig = make_subplots(rows=1, cols=4, subplot_titles=titles, shared_yaxes=True)
    for c, dist in enumerate(DISTRIBUTIONS, start=1):
        for (pe, layers, recipe), d in main[main.distribution == dist].groupby(["pe", "layers", "recipe"], sort=False):
            key = f"{pe}-{layers}"
            seeds = f" ({d['count'].max()} seeds)" if d["count"].max() > 1 else ""
            fig.add_trace(go.Scatter(x=[f"{lo}-{hi}" for lo, hi in zip(d.length_lo, d.length_hi)], y=d.exact_match,
                                     error_y=dict(type="data", array=d["std"]), mode="lines+markers",
                                     name=f"{pe}, {layers} layer(s), {recipe}{seeds}", legendgroup=f"{key}-{recipe}",
                                     showlegend=c == 1, line=dict(color=COLORS.get(key), dash=DASH.get(recipe, "dot"))), 1, c)
    uni = df[(df.train_distribution == "uniform") & (df.distribution != "recursive_flip")
             & ~((df.length_lo == 1) & (df.length_hi < train_hi))]
    for (pe, layers, recipe, dist), d in uni.groupby(["pe", "layers", "recipe", "distribution"], sort=False):
        fig.add_trace(go.Scatter(x=[f"{lo}-{hi}" for lo, hi in zip(d.length_lo, d.length_hi)], y=d.exact_match,
                                 mode="lines+markers", name=f"{pe}, {layers}L, {recipe}, trained Uniform, test {dist}",
                                 line=dict(color=COLORS.get(f"{pe}-{layers}"), dash="solid" if dist == "uniform" else "dot")), 1, 4)
    for c in range(1, 5):
        fig.update_xaxes(title=f"string length (train: 1-{train_hi})" if c == 2 else None, type="category", row=1, col=c)
    fig.update_yaxes(title="exact match", range=[-0.03, 1.03], row=1, col=1)
    legend = sum(1 for t in fig.data if t.showlegend is not False)  # every entry visible: the figure grows with the models
    fig.update_layout(title="Copy (paper 000): whole-string exact match by length", height=max(460, 32 * legend + 160), width=1600)
    return fig


def loss_figure(curves: pd.DataFrame) -> go.Figure:
    """Training loss, batch exact match and the curriculum's upper length against the step, one line per model."""
    fig = make_subplots(rows=1, cols=3, subplot_titles=["loss (nats per target token)", "training-batch exact match",
                                                        "curriculum: longest training length"])
    for (pe, layers, train, seed), d in curves.groupby(["pe", "layers", "train_distribution", "seed"], sort=False):
        name, color = f"{pe}, {layers}L, {train}, seed {seed}", COLORS.get(f"{pe}-{layers}")
        dash = "solid" if train == "imbalanced" else "dot"
        for c, col in enumerate(("loss", "batch_exact_match", "hi"), start=1):
            fig.add_trace(go.Scatter(x=d.step, y=d[col], mode="lines", name=name, legendgroup=name, showlegend=c == 1,
                                     line=dict(color=color, dash=dash)), 1, c)
    fig.update_yaxes(type="log", row=1, col=1)
    fig.update_xaxes(title="step")
    fig.update_layout(title="Copy (paper 000): training curves", height=420, width=1500)
    return fig


def attention_figure(model: LabForCausalLM, vocab, bits: np.ndarray) -> go.Figure:
    """The attention maps of every layer and head of ``model`` on one copy sequence (000 Figs. 4 / 8)."""
    import interp

    ids = encode_batch(vocab, [bits])["input_ids"][0]
    cap = interp.capture(lab_loaded(model, vocab, name="copy-rope-2"), ids, patterns=True)
    L, H = len(cap.patterns), cap.patterns[0].shape[0]
    labels = vocab.decode(ids.tolist())
    ticks = [f"{i}:{t}" for i, t in enumerate(labels)]
    fig = make_subplots(rows=L, cols=H, subplot_titles=[f"layer {l} head {h}" for l in range(L) for h in range(H)],
                        horizontal_spacing=0.03, vertical_spacing=0.08)
    for layer in range(L):
        for h in range(H):
            fig.add_trace(go.Heatmap(z=cap.patterns[layer][h].numpy(), x=ticks, y=ticks, colorscale="Viridis", zmin=0, zmax=1,
                                     showscale=layer == 0 and h == 0), layer + 1, h + 1)
            fig.update_yaxes(autorange="reversed", showticklabels=False, row=layer + 1, col=h + 1)
            fig.update_xaxes(showticklabels=False, row=layer + 1, col=h + 1)
    fig.update_layout(title=f"2-layer RoPE copier on one Imbalanced string of {len(bits)} bits (rows: queries, columns: keys)",
                      height=420 * L, width=380 * H + 100)
    return fig


def report(model: LabForCausalLM, vocab, out: Path, seed: int) -> Path:
    """``interp.scan`` of the 2D-RoPE model on eight Uniform copy sequences of 30 bits, written as an interp report.

    ``2 * 30 + 4 = 64`` tokens: the report's first-positions maps (64 x 64) show the whole sequence, the copy's
    diagonal at lag ``|s| + 1 = 31`` included.
    """
    import interp

    rng = np.random.default_rng([seed, 7])
    seqs = [encode_batch(vocab, [sample_string("uniform", 30, rng)])["input_ids"][0] for _ in range(8)]
    loaded = lab_loaded(model, vocab, name="copy-2d-rope")
    res = interp.scan(loaded, seqs, meta={"corpus": "copy task, Uniform strings of 30 bits"})
    return interp.write_report(res, out / "copy_2d_rope_report.html")


def main(argv: list[str] | None = None) -> pd.DataFrame:
    """Command-line entry (module docstring); the table of exact matches, one row per model, distribution and bin."""
    with one_thread():  # small matrices: a second OpenMP thread only waits for a busy core
        return run(argv)


def _rebuild(res: dict) -> LabForCausalLM:
    model = LabForCausalLM(LabConfig.from_dict(res["config"]))
    model.load_state_dict(res["state"])
    return model.eval()


def _with_recipe(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` with its ``recipe`` column, ``base`` where absent (rows written before the column existed)."""
    return table.assign(recipe=table["recipe"].fillna("base") if "recipe" in table else "base")


def summary(table: pd.DataFrame) -> pd.DataFrame:
    """``copy_summary.csv``: exact match over seeds per model, test distribution and bin (``seeds, mean, sd, min, max``;
    sd is the sample standard deviation, NaN for one seed)."""
    keys = MODEL_KEYS + ["distribution", "length_lo", "length_hi"]
    g = _with_recipe(table).groupby(keys, sort=False).exact_match
    return g.agg(seeds="count", mean="mean", sd="std", min="min", max="max").reset_index()


def _key(m: tuple) -> str:
    """``pe-layers-train[-recipe]`` of a model spec, the name ``--only`` takes (e.g. ``rope-2-imbalanced-wide_long``;
    no suffix for the base recipe, e.g. ``rope-1-imbalanced``)."""
    recipe = (m[7] if len(m) > 7 else {}).get("name", "base")
    return f"{m[0]}-{m[1]}-{m[3]}" + ("" if recipe == "base" else f"-{recipe}")


def _merge(path: Path, new: pd.DataFrame, keys=("pe", "layers", "train_distribution", "recipe", "seed")) -> pd.DataFrame:
    """``new`` plus the rows of ``path`` whose model and seed (``keys``) ``new`` does not have, in the file's order.

    A table without the ``recipe`` column (written before it existed) reads it as ``base``."""
    if not path.exists():
        return new
    old, new = _with_recipe(pd.read_csv(path)), _with_recipe(new)
    out = replace_rows(old, new, list(keys))
    both = pd.concat([old, new], ignore_index=True)  # models keep the place they first had in the file
    first = {k: i for i, k in enumerate(dict.fromkeys(zip(*(both[c] for c in keys[:-1]))))}
    rank = np.array([first[k] for k in zip(*(out[c] for c in keys[:-1]))])
    return out.iloc[np.lexsort((np.arange(len(out)), out["seed"].to_numpy(), rank))].reset_index(drop=True)


def run(argv: list[str] | None = None) -> pd.DataFrame:
    """Train every model (or ``--only`` some) for every seed, evaluate every bin, write the CSVs, figures, model and report.

    With ``--only``, the rows of the models and seeds trained replace theirs in the existing ``copy.csv`` /
    ``copy_loss.csv`` (others kept); the 2D-RoPE model and report are written when ``rope2d-1-imbalanced`` seed
    ``seeds[0]`` is trained, the attention table and maps when ``rope-2-imbalanced`` is. Returns the rows trained.
    """
    ap = parser(__doc__, "tiny models, 20 steps, lengths up to 16 (seconds)")
    ap.add_argument("--steps-scale", type=float, default=1.0,
                    help="multiply the steps of the curriculum-trained baselines (full mode; 2D-RoPE keeps its 600)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--seeds", type=int, nargs="+", default=None, help="train each model once per seed (default: --seed)")
    ap.add_argument("--only", nargs="+", default=None, help="train only these models, e.g. rope-2-imbalanced rope-1-imbalanced")
    ap.add_argument("--jobs", type=int, default=2, help="worker processes (each one torch thread); 1: in this process")
    ap.add_argument("--save-dir", type=Path, default=None, help="where to save the trained 2D-RoPE model (default OUT/copy_2d_rope_model)")
    ap.add_argument("--no-report", action="store_true", help="skip the scan report of the 2D-RoPE model")
    ap.add_argument("--merge-from", type=Path, nargs="+", default=None,
                    help="train nothing: merge the copy.csv / copy_loss.csv of these output folders (runs split over "
                         "processes or machines) into OUT's tables, then write the summary and figures")
    ap.add_argument("--atlas", type=Path, default=None, metavar="DIR",
                    help="train nothing: the head atlas of a copier saved in DIR (copy_rope2_model/) -> OUT/copy_atlas.*")
    args = ap.parse_args(argv)
    if args.atlas:
        from interp.lab import load_lab
        try:
            model, vocab = load_lab(args.atlas)
        except FileNotFoundError as e:
            raise SystemExit(f"--atlas: {e}") from None
        args.out.mkdir(parents=True, exist_ok=True)
        return copy_atlas(model, vocab, QUICK if args.quick else FULL, args.seed, args.out)
    if args.merge_from:
        return merge_runs(args.merge_from, args.out, (QUICK if args.quick else FULL)["train_hi"])
    s = QUICK if args.quick else FULL
    specs = QUICK_MODELS if args.quick else [m[:4] + (max(1, round(m[4] * (args.steps_scale if m[5] else 1))),) + m[5:]
                                             for m in FULL_MODELS]
    if args.only:
        unknown = set(args.only) - {_key(m) for m in specs}
        if unknown:
            raise SystemExit(f"--only: unknown model(s) {sorted(unknown)}; use some of {[_key(m) for m in specs]}")
        specs = [m for m in specs if _key(m) in args.only]
    seeds = args.seeds or [args.seed]
    jobs = 1 if args.quick else args.jobs
    args.out.mkdir(parents=True, exist_ok=True)
    vocab = copy_vocab()
    tests = {seed: {(dist, lo, hi): sample_strings(dist, count, lo, hi, np.random.default_rng([seed, 1000 + i, j]))
                    for i, dist in enumerate(DISTRIBUTIONS) for j, (lo, hi, count) in enumerate(s["bins"])} for seed in seeds}
    t_all = time.perf_counter()
    work = [(spec, s, seed, tests[seed]) for spec in sorted(specs, key=lambda m: -m[4] * m[1]) for seed in seeds]  # longest first
    if jobs > 1:
        with mp.get_context("fork").Pool(min(jobs, len(work))) as pool:
            results = pool.map(train_one, work, chunksize=1)
    else:
        results = [train_one(w) for w in work]
    order = {_key(m): i for i, m in enumerate(specs)}
    results.sort(key=lambda r: (order[r["key"]], r["seed"]))
    for r in results:
        print(f"{r['key']}, seed {r['seed']}: train {r['t_train']:.0f} s (final loss {r['final_loss']:.4f}, curriculum "
              f"reached {r['final_hi']}), eval {r['t_eval']:.0f} s", flush=True)
    df = pd.DataFrame([row for r in results for row in r["rows"]])[COLUMNS]
    curves = pd.concat([r["curve"] for r in results], ignore_index=True)[LOSS_COLUMNS]
    table, all_curves = write_tables(df, curves, args.out, merge=bool(args.only))
    by_key = {(r["key"], r["seed"]): r for r in results}

    first = seeds[0]
    if ("rope2d-1-imbalanced", first) in by_key:
        r2d = _rebuild(by_key[("rope2d-1-imbalanced", first)])
        save_lab(r2d, vocab, args.save_dir or args.out / "copy_2d_rope_model")
        if not args.no_report:
            print(f"  report: {report(r2d, vocab, args.out, seeds[0])}", flush=True)

    # 000 Figs. 4 / 8: where the 2-layer RoPE copier looks, trained and (the null) at initialisation
    attn = None
    if (ATTENTION_MODEL, first) in by_key:
        attn = attention_outputs(by_key[(ATTENTION_MODEL, first)], specs, s, vocab, seeds[0], args.out)
        save_lab(_rebuild(by_key[(ATTENTION_MODEL, first)]), vocab, args.out / "copy_rope2_model")
        copy_atlas(_rebuild(by_key[(ATTENTION_MODEL, first)]), vocab, s, seeds[0], args.out)

    show = df.assign(bin=df.length_lo.astype(str) + "-" + df.length_hi.astype(str),
                     model=df.pe + "/" + df.layers.astype(str) + "L/" + df.train_distribution + "/" + df.recipe
                     + "/s" + df.seed.astype(str))
    with pd.option_context("display.width", 200):
        print(show.pivot_table(index=["distribution", "model"], columns="bin", values="exact_match", sort=False).round(3).to_string())
        if attn is not None:
            print(attn.round(3).to_string())
    save_figure(figure(table, s["train_hi"]), args.out, "copy")
    save_figure(loss_figure(all_curves), args.out, "copy_loss")
    print(f"total {time.perf_counter() - t_all:.0f} s ({jobs} worker process(es), one torch thread each)", flush=True)
    return df


def write_tables(df: pd.DataFrame, curves: pd.DataFrame, out: Path, merge: bool) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Write ``copy.csv``, ``copy_summary.csv`` and ``copy_loss.csv`` in ``out`` from these rows and curves (``merge``:
    they replace their own models and seeds in the tables already there, others kept); returns the whole table and the
    whole curves, as written."""
    table = _merge(out / "copy.csv", df) if merge else df
    table = _with_recipe(table)[COLUMNS]
    table.to_csv(out / "copy.csv", index=False)
    summary(table).to_csv(out / "copy_summary.csv", index=False)
    all_curves = _merge(out / "copy_loss.csv", curves) if merge else curves
    all_curves = _with_recipe(all_curves)[LOSS_COLUMNS]
    all_curves.to_csv(out / "copy_loss.csv", index=False)
    return table, all_curves


def merge_runs(dirs: list[Path], out: Path, train_hi: int) -> pd.DataFrame:
    """``--merge-from``: the rows of the runs in ``dirs`` (each an ``--out`` folder of this script) replace their models
    and seeds in ``out``'s tables; writes the summary and the figures. Raises SystemExit naming a folder without
    ``copy.csv``."""
    missing = [str(d) for d in dirs if not (d / "copy.csv").exists()]
    if missing:
        raise SystemExit(f"--merge-from: no copy.csv in {missing}; give the --out folders of finished runs")
    merge_sources(["copy.csv", "copy_loss.csv"], dirs)  # provenance.json keeps each run's own command and seed
    df = pd.concat([pd.read_csv(d / "copy.csv") for d in dirs], ignore_index=True)
    curves = pd.concat([pd.read_csv(d / "copy_loss.csv") for d in dirs if (d / "copy_loss.csv").exists()], ignore_index=True)
    out.mkdir(parents=True, exist_ok=True)
    table, all_curves = write_tables(df, curves, out, merge=True)
    save_figure(figure(table, train_hi), out, "copy")
    save_figure(loss_figure(all_curves), out, "copy_loss")
    print(f"merged {len(df)} rows from {len(dirs)} run(s) into {out / 'copy.csv'}", flush=True)
    return df


def attention_outputs(res: dict, specs: list, s: dict, vocab, seed: int, out: Path) -> pd.DataFrame:
    """``copy_attention.csv`` / ``.png`` and the token viewer of the trained 2-layer RoPE copier ``res`` (and at init)."""
    rope2 = _rebuild(res)
    spec2 = next(m for m in specs if _key(m) == ATTENTION_MODEL)
    r2 = spec2[7] if len(spec2) > 7 else {}
    init = build("rope", 2, spec2[2], {**s, **{k: r2[k] for k in ("d_model", "d_mlp") if k in r2}}, vocab, seed,
                 r2.get("rope_base")).eval()
    frames = []
    for state, model in (("trained", rope2), ("init", init)):
        loaded = lab_loaded(model, vocab, name=f"copy-rope-2-{state}")
        for n in s["attn_lengths"]:
            rng = np.random.default_rng([seed, 77, n])
            strings = [sample_string("imbalanced", n, rng) for _ in range(s["attn_strings"])]
            em = float(exact_match(model, vocab, strings).mean())
            frames.append(copy_attention_table(loaded, vocab, strings).assign(model="rope, 2 layers", state=state, exact_match=em))
    attn = pd.concat(frames, ignore_index=True)
    attn.to_csv(out / "copy_attention.csv", index=False)
    bits = sample_string("imbalanced", s["attn_lengths"][0], np.random.default_rng([seed, 78]))
    save_figure(attention_figure(rope2, vocab, bits), out, "copy_attention")
    from interp.report.viewer import attention_view
    ids = encode_batch(vocab, [bits])["input_ids"][0]
    (out / "copy_rope2_view.html").write_text(attention_view(lab_loaded(rope2, vocab, name="copy-rope-2"), ids).html())
    return attn


def copy_atlas(model: LabForCausalLM, vocab, s: dict, seed: int, out: Path) -> pd.DataFrame:
    """The head atlas (``interp.experiments.atlas.run_atlas``) of a copier: its text pass on ``ATLAS_PROMPTS`` copy
    prompts of ``s["attn_lengths"][0]`` Imbalanced bits (the copier's own task; ``[BOS] s <\\n> <O:> s <EOS>``), its
    repeated-random pass on as many prompts of the same length over the copy vocabulary (BOS, r, r). Writes
    ``copy_atlas.csv`` (the atlas table, one row per head, with the copy prompts' exact match and each role's support
    over ``ATLAS_SUPPORT`` prompt resamples), ``copy_atlas_roles.csv``
    (per role: heads, threshold, chance, attainable share; ``role_summary``) and ``copy_atlas_grid.{html,png}`` (the
    role grid); returns the table."""
    from interp.experiments.atlas import AtlasConfig, role_summary, run_atlas
    from interp.report.atlas_page import role_grid

    n = s["attn_lengths"][0]
    rng = np.random.default_rng([seed, 79, n])
    strings = [sample_string("imbalanced", n, rng) for _ in range(ATLAS_PROMPTS)]
    prompts = encode_batch(vocab, strings)["input_ids"]
    loaded = lab_loaded(model, vocab, name="copy-rope-2")
    res = run_atlas(loaded, AtlasConfig(prompts=len(strings), tokens=prompts.shape[1], seed=seed, inp=False, support=ATLAS_SUPPORT),
                    text_prompts=prompts)
    table = res.table.assign(exact_match=float(exact_match(model, vocab, strings).mean()), bits=n)
    table.to_csv(out / "copy_atlas.csv", index=False)
    role_summary(table, res.attainable).to_csv(out / "copy_atlas_roles.csv", index=False)
    save_figure(role_grid(table).update_layout(title=f"2-layer RoPE copier: dominant role of every head ({n}-bit copy prompts)"),
                out, "copy_atlas_grid")
    show = ["layer", "head", "roles", "prev_token_score", "duplicate_token_score", "induction_score", "rr_induction_score",
            "rr_echo_score", "sink_weight", "slash_score", "slash_delta"]
    print(table[[c for c in show if c in table]].round(3).to_string(), flush=True)
    return table


if __name__ == "__main__":
    main()
