"""Paper 000's copy experiment at lab scale: 1-layer 2D-RoPE against 1-layer RoPE, NoPE and 2-layer RoPE.

000 Sec. 3.4.2 / 4.2 and App. D (Figs. 3, 6): train on Imbalanced binary strings (``s <\\n> <O:> s <EOS>``, loss
on the copy and EOS), test whole-string exact match (teacher forced: every argmax of the copy and EOS right)
on Uniform, Imbalanced and Recursive-Flip strings in length bins up to 20x the training length. Expected
(000): 2D-RoPE copies far beyond the training length; 1-layer shift-invariant models (RoPE, NoPE) cannot
copy even short strings exactly (Thm 3.1); 2-layer RoPE copies in range but not beyond it.

Scale here (000: 1 layer x 2 heads of width 512, 60k steps of 256 strings, lengths 1..100, 8 seeds): every
model has width 128 in ONE head (``d_head`` 128: 32 row and 32 column planes for 2D-RoPE), SwiGLU MLP 128,
trained ``--steps`` (600) AdamW steps of 32 strings of length 1..64 (lr 1e-3, warmup 100, cosine to 1e-4,
weight decay 0.01, betas (0.9, 0.95) as 000 App. D), one seed. 2D-RoPE base 100 (000 Sec. 4.1), RoPE base 1e4.
Test strings per bin (the same for every model): 200 (1-64), 100 (120-128), 50 (600-640), 50 (1200-1280).

Writes ``copy.csv`` (pe, layers, distribution, length_lo, length_hi, exact_match), ``copy.{html,png}``, the
trained 2D-RoPE model (``interp.lab.save_lab``: weights, config, vocabulary) in ``copy_2d_rope_model/`` (or
``--save-dir``), and ``copy_2d_rope_report.html``: ``interp.scan`` of that model on three test strings.

    python analyses/copy_2d_rope.py [--steps 600] [--seed 0] [--out figures/] [--save-dir DIR] [--quick]
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
from interp.lab import LabConfig, LabForCausalLM, TrainConfig, lab_loaded, save_lab, train_model  # noqa: E402
from interp.lab.copy_task import DISTRIBUTIONS, copy_vocab, encode_batch, exact_match, sample_string, sample_strings, train_batch_fn  # noqa: E402

MODELS = [("rope2d", 1), ("rope", 1), ("nope", 1), ("rope", 2)]
FULL = dict(d_model=128, d_mlp=128, batch=32, train_hi=64, bins=[(1, 64, 200), (120, 128, 100), (600, 640, 50), (1200, 1280, 50)])
QUICK = dict(d_model=32, d_mlp=32, batch=8, train_hi=8, bins=[(1, 8, 6), (12, 16, 4)])
COLORS = {"rope2d-1": "#d62728", "rope-1": "#1f77b4", "nope-1": "#7f7f7f", "rope-2": "#2ca02c"}


def build(pe: str, layers: int, s: dict, vocab, seed: int) -> LabForCausalLM:
    """A lab decoder of the experiment's size: one head of width ``d_model`` per layer."""
    cfg = LabConfig(vocab_size=len(vocab), n_layers=layers, n_heads=1, d_model=s["d_model"], d_mlp=s["d_mlp"], pe=pe,
                    rope_base=100.0 if pe == "rope2d" else 1e4, newline_ids=(vocab.id("<\\n>"),), max_positions=4096)
    torch.manual_seed(seed)
    return LabForCausalLM(cfg)


def figure(df: pd.DataFrame) -> go.Figure:
    """Exact match against the length bin, one panel per test distribution, one line per model."""
    fig = make_subplots(rows=1, cols=len(DISTRIBUTIONS), subplot_titles=list(DISTRIBUTIONS), shared_yaxes=True)
    for c, dist in enumerate(DISTRIBUTIONS, start=1):
        for (pe, layers), d in df[df.distribution == dist].groupby(["pe", "layers"], sort=False):
            key = f"{pe}-{layers}"
            fig.add_trace(go.Scatter(x=[f"{lo}-{hi}" for lo, hi in zip(d.length_lo, d.length_hi)], y=d.exact_match,
                                     mode="lines+markers", name=f"{pe}, {layers} layer(s)", legendgroup=key, showlegend=c == 1,
                                     line=dict(color=COLORS.get(key))), 1, c)
        fig.update_xaxes(title="string length (train: 1-64)" if c == 2 else None, type="category", row=1, col=c)
    fig.update_yaxes(title="exact match", range=[-0.03, 1.03], row=1, col=1)
    fig.update_layout(title="Copy (paper 000): trained on Imbalanced strings of length 1-64, whole-string exact match",
                      height=420, width=1200)
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


def run(argv: list[str] | None = None) -> pd.DataFrame:
    """Train the four models, evaluate every bin, write the CSV, figure, model and report; returns the table."""
    ap = parser(__doc__, "tiny models, 20 steps, lengths up to 16 (seconds)")
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--save-dir", type=Path, default=None, help="where to save the trained 2D-RoPE model (default OUT/copy_2d_rope_model)")
    ap.add_argument("--no-report", action="store_true", help="skip the scan report of the 2D-RoPE model")
    args = ap.parse_args(argv)
    s = QUICK if args.quick else FULL
    steps = 20 if args.quick else args.steps
    args.out.mkdir(parents=True, exist_ok=True)
    vocab = copy_vocab()
    tests = {(dist, lo, hi): sample_strings(dist, count, lo, hi, np.random.default_rng([args.seed, 1000 + i, j]))
             for i, dist in enumerate(DISTRIBUTIONS) for j, (lo, hi, count) in enumerate(s["bins"])}
    rows, t_all = [], time.perf_counter()
    for pe, layers in MODELS:
        model = build(pe, layers, s, vocab, args.seed)
        t0 = time.perf_counter()
        losses = train_model(model, train_batch_fn(vocab, "imbalanced", 1, s["train_hi"], s["batch"]),
                             TrainConfig(steps=steps, lr=1e-3, warmup=min(100, steps // 4), weight_decay=0.01,
                                         betas=(0.9, 0.95), seed=args.seed))
        t1 = time.perf_counter()
        for (dist, lo, hi), strings in tests.items():
            rows.append(dict(pe=pe, layers=layers, distribution=dist, length_lo=lo, length_hi=hi,
                             exact_match=float(exact_match(model, vocab, strings).mean())))
        print(f"{pe}, {layers} layer(s): train {t1 - t0:.0f} s (final loss {np.mean(losses[-20:]):.4f}), "
              f"eval {time.perf_counter() - t1:.0f} s", flush=True)
        if pe == "rope2d":
            save_dir = args.save_dir or args.out / "copy_2d_rope_model"
            save_lab(model, vocab, save_dir)
            if not args.no_report:
                print(f"  report: {report(model, vocab, args.out, args.seed)}", flush=True)
    df = pd.DataFrame(rows)[["pe", "layers", "distribution", "length_lo", "length_hi", "exact_match"]]
    df.to_csv(args.out / "copy.csv", index=False)
    table = df.assign(bin=df.length_lo.astype(str) + "-" + df.length_hi.astype(str), model=df.pe + "/" + df.layers.astype(str) + "L")
    print(table.pivot_table(index=["distribution", "model"], columns="bin", values="exact_match", sort=False).round(3).to_string())
    save_figure(figure(df), args.out, "copy")
    print(f"total {time.perf_counter() - t_all:.0f} s", flush=True)
    return df


if __name__ == "__main__":
    main()
