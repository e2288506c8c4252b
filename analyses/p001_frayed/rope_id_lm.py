"""RoPE-ID against RoPE, half RoPE and NoPE on small byte-level language models (paper 001 Sec. 4.1, 5, Tables 1-2, Figs. 13-14).

Paper 001 trains 1B / 3B Llama decoders on 4,096 tokens with RoPE (base 500k), HalfRoPE (the original RoPE on
half the planes), high-frequency RoPE and RoPE-ID (half the planes rotated, wavelengths 32..2048 tokens, i.e.
two full turns per training length at the slow end; plus the attention temperature
``(0.1 ln(max(N, 4096) / 4096) + 1) ** 2``) and evaluates them at 4k, 8k, 16k (RULER, LongBench). Its claim:
RoPE-ID keeps its key/query clusters and its retrieval beyond the training length, where RoPE collapses.

Here, on one CPU thread, the same comparison at small scale (``interp.lab``): 2-layer decoders (2 heads of
d_head 32, 16 rotation planes; d_model 64, SwiGLU d_mlp 256), byte-level vocabulary, trained on the first
90% of the Python language reference (``interp.lab.text_lm``) at length ``n`` = 64 tokens, with

- ``rope``: RoPE base 1e4 (11 of 16 planes never complete a turn in 64 tokens, as base 500k at 4,096);
- ``partial``: HalfRoPE, ``PartialRope(0.5)``: RoPE base 1e4 on the 8 highest-frequency planes;
- ``rope-id``: ``RopeID(0.5)`` with wavelengths rescaled to the training length: longest ``n / 2`` = 32
  (two turns per training length, as 2048 in 4096), shortest 8 (001's 32 is ``n / 128``, below one token
  here; 8 is the shortest that keeps the paper's "not faster than about one turn per 2 pi tokens" and
  leaves a 4x range of wavelengths);
- ``rope-id+temp``: the same ``rope-id`` models evaluated with the temperature, its ``L`` rescaled from
  4,096 to the training length ``n`` (``LabConfig(temperature_length=n)``: 1 up to ``n``, 1.14 at 2n,
  1.30 at 4n, 1.46 at 8n): 001's "RoPE-ID (scaling)";
- ``nope``: no position encoding;

``--seeds`` seeds each (different initialisation and data order). Every model is saved with
``interp.lab.save_lab`` and evaluated at ``n, 2n, 4n, 8n`` tokens:

- ``nll``: mean next-token NLL (nats per byte) over all positions of ``--eval-windows`` disjoint windows of
  the held-out 10% (the same windows' text for every model); ``nll_beyond``: the same over positions
  ``>= n`` only (NaN at ``n``);
- ``passkey_acc``: exact retrieval of a ``--key-len``-symbol passkey (``interp.lab.text_lm``: a needle
  ``<needle> k_1..k_K`` at a uniform depth of held-out text, asked for at the end; exact match of the K
  symbols under teacher forcing = greedy decoding of the key; chance ``10 ** -K``) over ``--passkeys``
  sequences; ``passkey_symbol_acc``: the share of key symbols right. A share ``--passkey-frac`` of the
  training rows are passkey sequences of length ``n``, and the training loss is the next-token loss plus
  the mean loss on the passkey answers (``text_lm.lm_passkey_loss``; 001's models learn retrieval from
  their pretraining data; these are too small to, so the task is in the training mixture). With the
  default one-symbol key, retrieval is a content look-up (the key symbols occur only in the needle),
  which RoPE must still perform through planes that rotate further than in training;
- geometry (the measures of ``interp sweep``): the saved model loaded with ``interp.load_model("local:DIR")``
  and scanned with ``interp.experiments.sweep`` (``ScanConfig(geometry=True)``, ``beyond_context=True``; context = n) on
  ``--geometry-prompts`` held-out windows' prefixes at every length: the median over the model's heads of
  ``fsv_ratio_k`` (post- / pre-RoPE spectral norm of the keys), ``srank_k_pre``, ``srank_k_rot``,
  ``silhouette_pre``, ``silhouette_rot`` (q vs k clusters), ``cos_qk_pre``, ``cos_qk_rot`` and
  ``sink_weight`` / ``sink_weight_norope`` (mean attention on token 0 with / without the rotation).

Where this differs from 001: 64-token training and 512-token evaluation instead of 4k / 16k; a 2-layer,
0.17M-parameter byte model trained for ``--steps`` steps of 32 x 64 tokens (AdamW, lr 3e-3, weight decay
0.1, betas 0.9 / 0.95 as 001) instead of 21B tokens; perplexity
and one synthetic passkey task instead of RULER / LongBench; RoPE base 1e4 instead of 500k; no YaRN and no
high-frequency-RoPE baseline; wavelengths and temperature rescaled as above.

Writes ``rope_id_lm.csv`` (one row per ``pe, seed, eval_length``: ``pe, seed, train_length, eval_length, nll,
nll_beyond, passkey_acc, passkey_symbol_acc``, the geometry columns, ``final_loss``, ``train_seconds``),
``rope_id_lm_summary.csv`` (mean, std and min / max over seeds) and ``rope_id_lm.{html,png}``.

    python -m analyses.p001_frayed.rope_id_lm [--steps 600] [--seeds 3] [--workers 1] [--models-dir DIR] [--quick] [--out DIR]
"""

from __future__ import annotations

import multiprocessing as mp
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots

import interp
from interp.experiments.sweep import sweep
from interp.lab import LabConfig, LabForCausalLM, TrainConfig, save_lab, train_model
from interp.lab import text_lm

from analyses._common import parser, save_figure

PES = ["rope", "partial", "rope-id", "rope-id+temp", "nope"]
TRAINED = ["rope", "partial", "rope-id", "nope"]  # rope-id+temp = the rope-id weights with the temperature
GEOMETRY = ["fsv_ratio_k", "srank_k_pre", "srank_k_rot", "silhouette_pre", "silhouette_rot", "cos_qk_pre", "cos_qk_rot",
            "sink_weight", "sink_weight_norope"]
METRICS = ["nll", "nll_beyond", "passkey_acc", "passkey_symbol_acc", *GEOMETRY]
COLORS = {"rope": "#d62728", "partial": "#ff7f0e", "rope-id": "#2ca02c", "rope-id+temp": "#17becf", "nope": "#7f7f7f"}


def lab_config(pe: str, n: int, d_model: int, n_layers: int) -> LabConfig:
    """The lab model of one encoding (module docstring); ``rope-id+temp`` has the rope-id weights' config plus the temperature."""
    base = "rope-id" if pe == "rope-id+temp" else pe
    return LabConfig(vocab_size=len(text_lm.BYTE_VOCAB), n_layers=n_layers, n_heads=2, d_model=d_model, d_mlp=4 * d_model,
                     pe=base, rope_base=1e4, partial_fraction=0.5, rope_id_wavelengths=(8.0, n / 2), max_positions=n,
                     temperature_length=n if pe == "rope-id+temp" else 0)


def evaluate(model, test: np.ndarray, n: int, lengths: list[int], args) -> list[dict]:
    """NLL and passkey accuracy at every evaluation length (same held-out windows and passkeys for every model)."""
    rows = []
    for length in lengths:
        w = text_lm.disjoint_windows(test, length, args.eval_windows)
        nll = text_lm.token_nll(model, w)
        keys = text_lm.passkey_batch(test, length, args.passkeys, np.random.default_rng(10_000 + length), args.key_len)
        exact, per_symbol = text_lm.passkey_accuracy(model, keys, args.key_len)
        rows.append(dict(eval_length=length, nll=float(nll.mean()), nll_beyond=float(nll[:, n - 1:].mean()) if length > n else np.nan,
                         passkey_acc=exact, passkey_symbol_acc=per_symbol))
    return rows


def geometry(directory: Path, test: np.ndarray, lengths: list[int], args) -> dict[int, dict]:
    """Median over heads of the ``GEOMETRY`` columns at every length, from ``interp.experiments.sweep`` on the saved model."""
    loaded = interp.load_model(f"local:{directory}", device="cpu")
    p = text_lm.disjoint_windows(test, max(lengths), args.geometry_prompts)
    cfg = interp.ScanConfig(geometry=True, cluster_points=args.cluster_points, counterfactual_queries=0)
    res = sweep(loaded, p, lengths, cfg, beyond_context=True)
    return {n: {c: float(r.heads[c].median()) for c in GEOMETRY} for n, r in res.results.items()}


def run_one(job: tuple[str, int], args, n: int, lengths: list[int], models_dir: Path) -> list[dict]:
    """Train (one thread) and evaluate one (encoding, seed); ``rope-id`` also yields its ``rope-id+temp`` rows."""
    pe, seed = job
    torch.set_num_threads(1)
    train, test = text_lm.split_text()
    model = LabForCausalLM(lab_config(pe, n, args.d_model, args.layers))
    t0 = time.perf_counter()
    losses = train_model(model, text_lm.lm_batch_fn(train, n, args.batch, args.passkey_frac, args.key_len),
                         loss_fn=text_lm.lm_passkey_loss, cfg=TrainConfig(steps=args.steps, lr=args.lr, warmup=min(100, args.steps // 10), weight_decay=0.1,
                                     betas=(0.9, 0.95), seed=seed))
    secs = time.perf_counter() - t0
    rows = []
    for name in ([pe, "rope-id+temp"] if pe == "rope-id" else [pe]):
        d = models_dir / f"{name}_s{seed}"
        if name == "rope-id+temp":
            model.config.temperature_length = n
        save_lab(model, text_lm.BYTE_VOCAB, d)
        geo = geometry(d, test, lengths, args)
        for r in evaluate(model, test, n, lengths, args):
            rows.append(dict(pe=name, seed=seed, train_length=n, **r, **geo[r["eval_length"]],
                             final_loss=float(np.mean(losses[-50:])), train_seconds=round(secs, 1)))
    model.config.temperature_length = 0
    print(f"{pe} seed {seed}: loss {np.mean(losses[-50:]):.3f}, trained in {secs:.0f} s, done in {time.perf_counter() - t0:.0f} s",
          flush=True)
    return rows


def summarise(df: pd.DataFrame) -> pd.DataFrame:
    """Mean, std, min and max over seeds per (pe, eval_length) of every metric (tidy)."""
    g = df.groupby(["pe", "eval_length"], sort=False)[METRICS]
    parts = {s: getattr(g, s)().reset_index().melt(id_vars=["pe", "eval_length"], var_name="measure", value_name=s)
             for s in ("mean", "std", "min", "max")}
    out = parts["mean"]
    for s in ("std", "min", "max"):
        out = out.merge(parts[s])
    return out.assign(seeds=df.seed.nunique())


PANELS = [("nll", "held-out NLL, all positions (nats / byte)"), ("nll_beyond", "held-out NLL at positions >= n"),
          ("passkey_acc", "passkey exact match"), ("silhouette_rot", "silhouette q vs k, post-rotation (001 Fig. 14)"),
          ("fsv_ratio_k", "key FSV ratio post / pre (001 Fig. 4, 7)"), ("sink_weight", "sink weight (attention on token 0)")]


def figure(s: pd.DataFrame, n: int) -> go.Figure:
    fig = make_subplots(rows=2, cols=3, subplot_titles=[t for _, t in PANELS])
    for k, (col, _) in enumerate(PANELS):
        r, c = k // 3 + 1, k % 3 + 1
        for pe in PES:
            d = s[(s.pe == pe) & (s.measure == col)].sort_values("eval_length")
            if d.empty:
                continue
            fig.add_trace(go.Scatter(x=d.eval_length, y=d["mean"], mode="lines+markers", name=pe, legendgroup=pe, showlegend=k == 0,
                                     line=dict(color=COLORS[pe]), error_y=dict(type="data", symmetric=False,
                                                                               array=d["max"] - d["mean"], arrayminus=d["mean"] - d["min"])), r, c)
        fig.add_vline(x=n, line_dash="dot", line_color="#888", row=r, col=c)
        fig.update_xaxes(type="log", tickvals=sorted(s.eval_length.unique()), title="tokens", row=r, col=c)
    fig.update_layout(title=f"Byte-level LMs trained at n = {n} tokens, evaluated at n..8n (mean over seeds, bars: min-max; dotted: n)",
                      height=700, width=1300)
    return fig


def main(argv: list[str] | None = None) -> pd.DataFrame:
    ap = parser(__doc__, "n = 32, 40 steps, one seed, 2 lengths (seconds)")
    ap.add_argument("--train-length", type=int, default=64)
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--d-model", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--key-len", type=int, default=1)
    ap.add_argument("--passkey-frac", type=float, default=0.25)
    ap.add_argument("--passkeys", type=int, default=200)
    ap.add_argument("--eval-windows", type=int, default=16)
    ap.add_argument("--geometry-prompts", type=int, default=4)
    ap.add_argument("--cluster-points", type=int, default=200)
    ap.add_argument("--workers", type=int, default=1, help="processes training in parallel, one thread each")
    ap.add_argument("--models-dir", type=Path, default=None, help="where the trained models are saved (default: a temporary folder)")
    args = ap.parse_args(argv)
    if args.quick:
        args.train_length, args.steps, args.seeds, args.passkeys, args.eval_windows, args.geometry_prompts = 32, 40, 1, 32, 4, 2
        args.cluster_points = 40
    n = args.train_length
    lengths = [n, 2 * n] if args.quick else [n, 2 * n, 4 * n, 8 * n]
    models_dir = args.models_dir or Path(tempfile.mkdtemp(prefix="rope_id_lm-"))
    args.out.mkdir(parents=True, exist_ok=True)
    jobs = [(pe, s) for s in range(args.seeds) for pe in TRAINED]
    t0 = time.perf_counter()
    before = torch.get_num_threads()
    try:
        if args.workers > 1:
            with mp.get_context("fork").Pool(args.workers) as pool:
                parts = pool.starmap(run_one, [(j, args, n, lengths, models_dir) for j in jobs])
        else:
            parts = [run_one(j, args, n, lengths, models_dir) for j in jobs]
    finally:
        torch.set_num_threads(before)
    df = pd.DataFrame([r for p in parts for r in p])
    df["pe"] = pd.Categorical(df.pe, PES, ordered=True)
    df = df.sort_values(["pe", "seed", "eval_length"]).reset_index(drop=True)
    df["pe"] = df.pe.astype(str)
    df.to_csv(args.out / "rope_id_lm.csv", index=False)
    s = summarise(df)
    s.to_csv(args.out / "rope_id_lm_summary.csv", index=False)
    save_figure(figure(s, n), args.out, "rope_id_lm")
    print(f"{len(jobs)} models in {time.perf_counter() - t0:.0f} s; models in {models_dir}", flush=True)
    return df


if __name__ == "__main__":
    main()
