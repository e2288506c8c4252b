"""Paper 001 Fig. 7 analogue: how each RoPE variant shrinks a point cloud's first singular value with length.

Two parts, both with ``interp.rope.clouds.cloud_ratios`` (float64 Gram matrices, ``torch.linalg.eigvalsh``):

1. The synthetic cloud of Fig. 7: n tokens x d = 128, every row all ones, row i rotated at position i.
   FSV ratio ``||R(X)||_2 / ||X||_2`` and stable-rank ratio ``srank(R(X)) / srank(X)`` against n for
   RoPE (base 1e4 and the paper's 5e5), the paper's baselines (HalfRoPE: HF ``partial_rotary_factor``
   0.5, i.e. the full range 1 .. 1/5e5 spread over the first half of the planes; high-frequency RoPE,
   base 652), RoPE-ID, and the project's variants on the base-1e4 layer (PartialRope, p-RoPE, PI,
   YaRN, ScaledRope, ShuffledRope, 2D-RoPE on lines of 64 tokens). Limits: the closed form
   (``rank1_rotated_gram``) at n = 2**20 and 2**30 and ``ones_cloud_limit`` (n -> inf).
2. Real pre-RoPE key clouds: one pydoc prompt per model, keys of every (layer, kv_head), the same
   ratios for n up to the prompt length under the model's own RoPE and the variants. Gemma-3's sliding
   (base 1e4) and global (base 1e6) layers are reported apart. Keys come from forward hooks on the
   layers' ``k_proj`` (``k_norm`` with QK-norm), the scan's hook points, in one sdpa forward; they are
   checked against ``interp.capture(...).k_pre`` on the first 64 tokens (the bridge's eager capture
   needs O(layer * head * pos^2) memory, 22 GB for qwen2.5-coder-0.5b at 2048 tokens).

Writes into ``--out`` (default ``figures/``): ``rope_variants_fig7_ones.csv``, ``rope_variants_fig7_limits.csv``,
``rope_variants_fig7_models.csv`` (every layer, kv head, variant, n), ``rope_variants_fig7_models_summary.csv``
(mean over heads at the longest n), ``rope_variants_fig7_ones.png/.html``, ``rope_variants_fig7_models.png/.html``.

    python -m analyses.p001_frayed.rope_variants_fig7 [--quick] [--tokens 2048] [--n-max 16384] [--models ...] [--out figures]
"""

from __future__ import annotations

import math
import time

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import torch
from plotly.colors import qualitative
from plotly.subplots import make_subplots

import interp
from interp.measures import spectrum
from interp.models.arch import rope_specs
from interp.rope import RopeSpec, RopeVariant, default_inv_freq
from interp.rope.clouds import cloud_ratios, ones_cloud_limit
from interp.rope.variants import (PRope, PartialRope, PositionInterpolation, Rope2D, RopeID, ScaledRope, ShuffledRope, Yarn,
                                  newline_token_ids)

from analyses._common import installed, one_thread, parser, save_figure

D = 128
TRAIN = 4096  # Fig. 7's hypothetical training length
LINE = 64  # synthetic line width for 2D-RoPE on the all-ones cloud (63 tokens + a line break)


def ones_variants() -> list[tuple[str, RopeVariant, RopeSpec]]:
    """(label, variant, layer) for part 1; d_head = 128 throughout."""
    s4, s5 = RopeSpec(default_inv_freq(1e4, D)), RopeSpec(default_inv_freq(5e5, D))
    # HalfRoPE as trained in paper 001 (HF partial_rotary_factor 0.5): base**(-2l/64) on planes 0..31, planes 32..63 unrotated
    half = RopeSpec(torch.cat([default_inv_freq(5e5, D // 2), torch.zeros(D // 4)]))
    return [
        ("rope (base 1e4)", RopeVariant(), s4),
        ("rope (base 5e5, paper's vanilla)", RopeVariant(), s5),
        ("half rope (paper: base 5e5 on half the planes)", RopeVariant(), half),
        ("high-freq rope (paper: base 652)", RopeVariant(), RopeSpec(default_inv_freq(652.0, D))),
        ("rope_id", RopeID(), s4),
        ("partial0.5 (top half of base 1e4)", PartialRope(0.5), s4),
        ("prope_drop0.25 (p = 0.75)", PRope(0.25), s4),
        ("pi4", PositionInterpolation(4.0), s4),
        ("yarn4 (L = 4096)", Yarn(4.0, TRAIN), s4),
        ("scaled2", ScaledRope(2.0), s4),
        ("scaled0.5", ScaledRope(0.5), s4),
        ("shuffled0", ShuffledRope(0), s4),
        (f"rope2d (lines of {LINE})", Rope2D((1,)), s4),
    ]


def model_variants(newlines: tuple[int, ...]) -> list[RopeVariant]:
    """Variants applied to every layer of a real model (each relative to that layer's own RoPE)."""
    return [RopeVariant(), PartialRope(0.5), PRope(0.25), RopeID(), PositionInterpolation(4.0), Yarn(4.0, TRAIN), ScaledRope(2.0),
            ScaledRope(0.5), ShuffledRope(0), Rope2D(newlines)]




def n_grid(n_max: int, points: int) -> list[int]:
    return sorted({int(round(x)) for x in np.geomspace(1, n_max, points)})


def ones_cloud(n_max: int, points: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Part 1: ratios against n (explicit rotation) and the large-n limits (closed form)."""
    ns = sorted(set(n_grid(n_max, points)) | {n for n in (512, TRAIN) if n <= n_max})  # the summary's columns are on the grid
    tokens = torch.zeros(n_max, dtype=torch.long)
    tokens[LINE - 1 :: LINE] = 1  # token id 1 is the line break of the synthetic grid
    frames, limits = [], []
    for label, var, spec in ones_variants():
        df = cloud_ratios(var, spec, ns, tokens=tokens if isinstance(var, Rope2D) else None)
        frames.append(df.assign(label=label))
        row = {"label": label, "variant": var.name}
        if not isinstance(var, Rope2D):
            big = cloud_ratios(var, spec, [2**20, 2**30], closed_form=True)
            lim = ones_cloud_limit(var, spec)
            row.update({"fsv_ratio_n2^20": big["fsv_ratio"].iloc[0], "fsv_ratio_n2^30": big["fsv_ratio"].iloc[1], "fsv_ratio_limit": lim["fsv_ratio"],
                        "srank_ratio_n2^30": big["srank_ratio"].iloc[1], "srank_ratio_limit": lim["srank_ratio"],
                        "unrotated_planes": lim["unrotated_planes"]})
        row["slowest_wavelength"] = 2 * math.pi / float(spec.inv_freq[spec.inv_freq > 0].min()) if isinstance(var, RopeVariant) and type(var) is RopeVariant else float("nan")
        limits.append(row)
    return pd.concat(frames, ignore_index=True), pd.DataFrame(limits)


def pre_rope_keys(model, tokens: torch.Tensor) -> list[torch.Tensor]:
    """Per layer ``[pos, kv_head, d_head]`` pre-RoPE keys, as the scan reads them (``interp.models.taps``), one forward."""
    from interp.models.taps import attention_taps

    keys: dict[int, torch.Tensor] = {}
    with torch.inference_mode(), attention_taps(model, lambda call: keys.__setitem__(call.layer, call.pre()[1].cpu())):
        model.hf.base_model(tokens[None].to(model.device), use_cache=False)
    return [keys[layer] for layer in range(model.card.n_layers)]


def layer_group(model, layer: int, spec: RopeSpec) -> str:
    w = model.card.sliding_window
    if all(x is None for x in w) or all(x is not None for x in w):
        return model.card.name
    kind = "sliding" if w[layer] is not None else "global"
    return f"{model.card.name} {kind} (base {spec.base:.0e})"


def real_clouds(name: str, n_tokens: int, points: int) -> tuple[pd.DataFrame, dict]:
    """Part 2 for one model: every layer's key cloud under every variant."""
    model = interp.load_model(name, device="cpu")
    tokens = interp.corpus.prompts(model, "pydoc", 1, n_tokens)[0]
    t0 = time.perf_counter()
    keys = pre_rope_keys(model, tokens)
    t_keys = time.perf_counter() - t0
    ref = interp.capture(model, tokens[:64]).k_pre  # cross-check the hook points on a short prefix
    short = pre_rope_keys(model, tokens[:64])
    check = max(float((a - b.float()).abs().max()) for a, b in zip(short, ref))
    scale = max(float(b.abs().max()) for b in ref)
    newlines = newline_token_ids(model.tokenizer, model.card.vocab_size)
    specs = rope_specs(model.hf)
    ns = n_grid(n_tokens, points)
    frames = []
    t0 = time.perf_counter()
    with one_thread():
        for layer, (k, spec) in enumerate(zip(keys, specs)):
            pred = spectrum.fsv_prediction(spectrum.gram(k), spec.pairing).numpy()  # Lemma 1, n -> inf, per kv head
            for var in model_variants(newlines):
                df = cloud_ratios(var, spec, ns, cloud=k, tokens=tokens)
                df["lemma1_pred"] = pred[df["head"].to_numpy()]
                frames.append(df.assign(model=name, group=layer_group(model, layer, spec), layer=layer))
    info = {"model": name, "tokens": n_tokens, "layers": len(keys), "kv_heads": keys[0].shape[1], "d_head": model.card.d_head,
            "keys_s": t_keys, "ratios_s": time.perf_counter() - t0, "capture_max_abs_diff": check, "capture_scale": scale,
            "newline_tokens": len(newlines), "line_breaks_in_prompt": int(torch.isin(tokens, torch.tensor(newlines)).sum())}
    return pd.concat(frames, ignore_index=True), info


def fig_ones(df: pd.DataFrame, limits: pd.DataFrame) -> go.Figure:
    fig = make_subplots(rows=1, cols=2, subplot_titles=("FSV ratio ||R(X)||<sub>2</sub> / ||X||<sub>2</sub>", "stable-rank ratio srank(R(X)) / srank(X)"))
    palette = qualitative.Dark24
    for i, (label, g) in enumerate(df.groupby("label", sort=False)):
        line = dict(color=palette[i % len(palette)], dash="dash" if "paper" in label else "solid", width=2.5 if label.startswith(("rope (", "rope_id")) else 1.8)
        fig.add_trace(go.Scatter(x=g["n"], y=g["fsv_ratio"], name=label, mode="lines", line=line, legendgroup=label), row=1, col=1)
        fig.add_trace(go.Scatter(x=g["n"], y=g["srank_ratio"], name=label, mode="lines", line=line, legendgroup=label, showlegend=False), row=1, col=2)
    for c in (1, 2):
        fig.add_vline(x=TRAIN, line_dash="dot", line_color="purple", row=1, col=c)
    for y, txt in ((1 / math.sqrt(2), "1/sqrt 2"), (1 / math.sqrt(D), "1/sqrt 128")):
        fig.add_hline(y=y, line_dash="dash", line_color="grey", annotation_text=txt, row=1, col=1)
    fig.update_xaxes(type="log", title="n (tokens)")
    fig.update_yaxes(type="log", row=1, col=2)
    fig.update_layout(title="All-ones cloud, d = 128 (analogue of paper 001, Fig. 7 left; dotted: 4096 tokens)", width=1300, height=560)
    return fig


def fig_models(df: pd.DataFrame) -> go.Figure:
    groups = list(dict.fromkeys(df["group"]))
    mean = df.groupby(["group", "variant", "n"], sort=False)[["fsv_ratio", "srank_ratio"]].mean().reset_index()
    fig = make_subplots(rows=2, cols=len(groups), subplot_titles=groups, shared_xaxes=True, vertical_spacing=0.08)
    variants = list(dict.fromkeys(df["variant"]))
    for j, g in enumerate(groups, start=1):
        for i, v in enumerate(variants):
            sub = mean[(mean["group"] == g) & (mean["variant"] == v)]
            color = qualitative.D3[i % len(qualitative.D3)]
            for r, col in ((1, "fsv_ratio"), (2, "srank_ratio")):
                fig.add_trace(go.Scatter(x=sub["n"], y=sub[col], mode="lines", name=v, line=dict(color=color), legendgroup=v,
                                         showlegend=(j == 1 and r == 1)), row=r, col=j)
    fig.update_xaxes(type="log")
    fig.update_xaxes(title="n (tokens)", row=2)
    fig.update_yaxes(title="FSV ratio (mean over heads)", row=1, col=1)
    fig.update_yaxes(title="srank ratio (mean over heads)", row=2, col=1)
    fig.update_layout(title="Pre-RoPE key clouds of the zoo models under RoPE variants (one pydoc prompt)", width=max(900, 360 * len(groups) + 250), height=720)
    return fig




def main(argv: list[str] | None = None) -> dict:
    ap = parser(__doc__, "n up to 4096, smollm2-135m only at 256 tokens (for tests)")
    ap.add_argument("--tokens", type=int, default=2048, help="prompt length for the real key clouds")
    ap.add_argument("--n-max", type=int, default=16384, help="longest all-ones cloud")
    args = ap.parse_args(argv)
    if args.quick:
        args.models, args.tokens, args.n_max = ["smollm2-135m"], 256, 4096
    args.out.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()

    with one_thread():
        ones, limits = ones_cloud(args.n_max, 24 if args.quick else 48)
    ones.to_csv(args.out / "rope_variants_fig7_ones.csv", index=False)
    limits.to_csv(args.out / "rope_variants_fig7_limits.csv", index=False)
    at = [n for n in (512, TRAIN, args.n_max) if n <= args.n_max]
    wide = ones[ones["n"].isin(at)].pivot_table(index="label", columns="n", values="fsv_ratio", sort=False)
    wide.columns = [f"fsv@{c}" for c in wide.columns]
    table = wide.join(limits.set_index("label")[["fsv_ratio_n2^20", "fsv_ratio_limit", "srank_ratio_limit"]])
    print(f"All-ones cloud, d = {D}: FSV ratio at n (explicit) and the large-n limits (closed form)")
    print(table.to_string(float_format=lambda v: f"{v:.4f}"))
    png = {"ones": save_figure(fig_ones(ones, limits), args.out, "rope_variants_fig7_ones")}

    frames, infos = [], []
    for name in installed(args.models):
        df, info = real_clouds(name, args.tokens, 12 if args.quick else 16)
        frames.append(df)
        infos.append(info)
        print(f"{name}: {info['layers']} layers x {info['kv_heads']} kv heads, d_head {info['d_head']}, {info['tokens']} tokens "
              f"({info['line_breaks_in_prompt']} line breaks); keys {info['keys_s']:.1f} s, ratios {info['ratios_s']:.1f} s; "
              f"hooks vs interp.capture on 64 tokens: max |diff| {info['capture_max_abs_diff']:.2g} (|k| up to {info['capture_scale']:.3g})")
    out = {"ones": ones, "limits": limits, "info": pd.DataFrame(infos)}
    if frames:
        models = pd.concat(frames, ignore_index=True)
        models.to_csv(args.out / "rope_variants_fig7_models.csv", index=False, float_format="%.7g")  # 7 digits: ~half the size
        last = models[models["n"] == models.groupby("model")["n"].transform("max")]
        summ = last.groupby(["group", "variant"], sort=False).agg(n=("n", "first"), heads=("fsv_ratio", "size"), fsv_ratio=("fsv_ratio", "mean"),
                                                                  fsv_ratio_min=("fsv_ratio", "min"), srank_ratio=("srank_ratio", "mean"),
                                                                  lemma1_pred=("lemma1_pred", "mean")).reset_index()
        summ.to_csv(args.out / "rope_variants_fig7_models_summary.csv", index=False)
        print("\nReal pre-RoPE key clouds at the longest n: mean over (layer, kv head); lemma1_pred = (1/sqrt 2) max_k alpha_k (n -> inf)")
        print(summ.pivot_table(index="variant", columns="group", values="fsv_ratio", sort=False).to_string(float_format=lambda v: f"{v:.3f}"))
        print(summ.pivot_table(index="variant", columns="group", values="srank_ratio", sort=False).to_string(float_format=lambda v: f"{v:.2f}"))
        png["models"] = save_figure(fig_models(models), args.out, "rope_variants_fig7_models")
        out.update(models=models, summary=summ)
    out["figures"] = png
    print(f"\nwrote {args.out}/rope_variants_fig7_* in {time.perf_counter() - t_start:.0f} s")
    return out


if __name__ == "__main__":
    main()
