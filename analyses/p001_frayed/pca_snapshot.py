"""Paper 001 Fig. 3 on the zoo models: a PCA snapshot of one kv head's keys and its queries, pre/post RoPE, short/long.

For each installed model, one pydoc prompt of ``--long`` tokens (per-model overrides with ``--long-for``; by default
smollm2-135m goes to 16384, twice its 8192-token context, the way the paper goes beyond Llama3's 8k training
length to 65536) and its first ``--short`` tokens (the same text's prefix, 1024 by default; the paper: 4096),
each captured with ``interp.capture``. ``interp.experiments.projection.pca_snapshot`` fits an uncentred 2-D projection
(scikit-learn TruncatedSVD) on the pre-RoPE keys of the kv head and queries of its query heads at the short
length and reuses it, unchanged, for the post-RoPE points and for the long prompt; every panel is titled with
the stable rank (``||X||_F^2 / ||X||_2^2``, full d_head space) of its keys and of its queries.

Which head: ``--layer`` / ``--kv-head`` (default: the layer nearest 2/3 of the depth, as the paper's layer 21 of
Llama3's 32, a global layer on Gemma-3 where sliding and global layers alternate; the 3rd kv head as in the
paper, or the last one where a model has fewer).

Writes into ``--out`` (default ``figures/``): ``pca_snapshot_<model>.{html,png}`` and ``pca_snapshot.csv`` (one
row per model and panel: stable ranks, cluster centres on the plane, prompt lengths, capture times; where the long
prompt goes beyond the context, one more row: the stable ranks of its first ``context`` post-RoPE positions, the
longest in-distribution prefix of the same text, not drawn).

    python -m analyses.p001_frayed.pca_snapshot [--quick] [--models ...] [--short 1024] [--long 8192] [--long-for smollm2-135m=16384] [--out figures]
"""

from __future__ import annotations

import gc
import time

import numpy as np
import pandas as pd
import torch

import interp
from interp.experiments.projection import group_points, pca_snapshot, stable_rank
from interp.report.geometry_figures import pca_snapshot_figure

from analyses._common import one_thread, parser, save_figure


def default_head(card) -> tuple[int, int]:
    """(layer, kv head): the layer nearest 2/3 of the depth (a global one if the model mixes sliding and global
    layers), and kv head 2 (the paper's 3rd key head) or the model's last kv head."""
    target = 2 * (card.n_layers - 1) / 3
    layers = range(card.n_layers)
    glob = [i for i in layers if card.sliding_window[i] is None]
    if glob and len(glob) < card.n_layers:
        layers = glob
    layer = min(layers, key=lambda i: (abs(i - target), i))
    return layer, min(2, card.n_kv_heads - 1)


def keep_layer(cap: interp.Capture, layer: int) -> interp.Capture:
    """The capture with every other layer's tensors dropped (frees memory; layer indices unchanged)."""
    empty = torch.empty(0)
    for name in ("q_pre", "k_pre", "q_rot", "k_rot"):
        xs = getattr(cap, name)
        for i in range(len(xs)):
            if i != layer:
                xs[i] = empty
    return cap


def run_model(name: str, short: int, long: int, layer: int | None, kv_head: int | None, quick: bool):
    model = interp.load_model(name, device="cpu")
    card = model.card
    dl, dk = default_head(card)
    layer, kv_head = (dl if layer is None else layer), (dk if kv_head is None else kv_head)
    beyond = long > card.context_length
    if beyond:
        print(f"{name}: {long} tokens exceed the {card.context_length}-token context: positions beyond it are out of distribution",
              flush=True)
    tokens = interp.corpus.prompts(model, "random" if quick else "pydoc", 1, long, beyond_context=beyond)[0]
    secs = {}
    t0 = time.perf_counter()
    cap_short = keep_layer(interp.capture(model, tokens[:short]), layer)
    secs["capture_short_s"] = time.perf_counter() - t0
    gc.collect()
    t0 = time.perf_counter()
    cap_long = keep_layer(interp.capture(model, tokens, beyond_context=beyond), layer)
    secs["capture_long_s"] = time.perf_counter() - t0
    gc.collect()
    with one_thread():
        snap = pca_snapshot(cap_short, layer, kv_head, cap_long)
        tab = snap.table().assign(beyond_context=[False, False, beyond, beyond])
        if beyond:  # the long prompt's first `context` positions: the same text at the longest in-distribution length
            n = card.context_length
            k, q, _ = group_points(cap_long, layer, kv_head, rope=True)
            qs = q[:n].transpose(0, 1).reshape(-1, q.shape[-1])
            extra = {"layer": layer, "kv_head": kv_head, "panel": f"post-RoPE, n = {n} (prefix of the long prompt, not drawn)",
                     "rope": True, "n": n, "srank_k": stable_rank(k[:n]), "srank_q": stable_rank(qs),
                     "srank_all": stable_rank(torch.cat([k[:n], qs])), "beyond_context": False}
            tab = pd.concat([tab, pd.DataFrame([extra])], ignore_index=True)
    tab = tab.assign(model=name, context=card.context_length, **secs)
    title = (f"{name}: PCA snapshot of layer {layer}, kv head {kv_head} and query heads {snap.heads[0]}-{snap.heads[-1]} "
             f"(uncentred, fitted pre-RoPE at n = {short}; context {card.context_length})")
    return snap, tab, title


def main(argv: list[str] | None = None) -> pd.DataFrame:
    ap = parser(__doc__, "tiny-llama at 32 and 64 random tokens")
    ap.add_argument("--short", type=int, default=1024, help="tokens of the prompt the projection is fitted on")
    ap.add_argument("--long", type=int, default=8192, help="tokens of the long prompt (same text; the short one is its prefix)")
    ap.add_argument("--long-for", nargs="*", default=["smollm2-135m=16384"], help="MODEL=N: another long length for MODEL")
    ap.add_argument("--layer", type=int, default=None)
    ap.add_argument("--kv-head", type=int, default=None)
    ap.add_argument("--max-points", type=int, default=1500, help="points drawn per cloud and panel (seeded subsample)")
    args = ap.parse_args(argv)
    torch.manual_seed(0)
    models = ["tiny-llama"] if args.quick else [m for m in args.models if interp.models.is_installed(m)]
    overrides = {k: int(v) for k, v in (x.split("=", 1) for x in args.long_for)}
    args.out.mkdir(parents=True, exist_ok=True)
    frames = []
    for name in models:
        t0 = time.perf_counter()
        short, long = (32, 64) if args.quick else (args.short, overrides.get(name, args.long))
        snap, tab, title = run_model(name, short, long, args.layer, args.kv_head, args.quick)
        tab["total_s"] = time.perf_counter() - t0
        frames.append(tab)
        save_figure(pca_snapshot_figure(snap, max_points=args.max_points, title=title), args.out, f"pca_snapshot_{name}")
        print(f"{name}: layer {snap.layer} kv head {snap.kv_head}, n = {short} / {long}, {tab['total_s'].iloc[0]:.0f} s; "
              "srank K: " + ", ".join(f"{p.label} {p.srank_k:.2f}" for p in snap.panels), flush=True)
        del snap
        gc.collect()
    df = pd.concat(frames, ignore_index=True)
    cols = ["model", "layer", "kv_head", "panel", "rope", "n", "context", "beyond_context", "srank_k", "srank_q", "srank_all",
            "k_pc1", "k_pc2", "q_pc1", "q_pc2", "capture_short_s", "capture_long_s", "total_s"]
    df = df[cols]
    df.to_csv(args.out / "pca_snapshot.csv", index=False)
    with pd.option_context("display.width", 250, "display.max_columns", 30, "display.precision", 3):
        print(df.drop(columns=["capture_short_s", "capture_long_s", "total_s"]).to_string(index=False))
    return df


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
