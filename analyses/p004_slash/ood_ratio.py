"""Paper 004 Sec. 3.1, Fig. 3b and Table 3: do the zoo's slash-dominant heads keep their slash on random tokens?

For each model, ``--prompts`` pydoc prompts (in distribution, ``interp.corpus.prompts(model, "pydoc", ...)``)
and as many random-token prompts (OOD: tokens i.i.d. uniform over the vocabulary without special tokens,
seeded; 004 App. H) of ``--tokens`` tokens each are scanned one prompt at a time (``interp.scan``), which
gives every prompt's average slash score ``S_p[layer, head, delta]`` (004 Def. 3.1, eq. 6; positions 0..3
dropped). The scores over a prompt set are the mean over its prompts (what one scan of all of them
gives: ``merge_results``). An SDH is a (layer, head, delta) with delta in 0..4 and in-distribution score
>= kappa = 0.1 (004 Sec. 3: a head can be an SDH at several lags, as in its Table 3); for each,
``ratio = slash_ood / slash_id`` (004 Fig. 3b). The paper reads its box plot as "most ratios above 0.5,
generally higher or comparable" (i.e. often above 1).

Interval: a bootstrap over prompts (``--boot`` resamples; in-distribution and OOD prompts resampled with
replacement independently, the SDH set fixed to the one found on all prompts) of the share of SDHs with
ratio > 0.5 (and > 1): the 2.5 and 97.5 percentiles.

004 used LongBench prompts and 500 OOD prompts of 6,000 tokens for 7-8B models; here pydoc text, 8 + 8
prompts of 1,024 tokens (the default report's size) for the zoo's 135M-500M models. Long-range SDHs
(004 Table 6, 500 <= delta <= 5000) need prompts of several thousand tokens (a long lag counts only
with >= 1,000 entries per prompt) and are not measured at 1,024 tokens.

Writes ``ood_ratio.csv`` (``model, layer, head, delta, slash_id, slash_ood, ratio``), ``ood_ratio_summary.csv``
(per model: SDH count, shares with ratio > 0.5 and > 1 with bootstrap intervals, median ratio; plus the
same shares of 004 Table 3's rows, ``source = 004 Table 3``), ``ood_ratio_paper004.csv`` (004 Table 3 as
printed: model, delta, head, in-distribution and OOD score) and ``ood_ratio.{html,png}``.

    python -m analyses.p004_slash.ood_ratio [--models ...] [--prompts 8] [--tokens 1024] [--boot 2000] [--seed 0] [--quick] [--out DIR]
"""

from __future__ import annotations

import time

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import torch

import interp

from analyses._common import parser, save_figure

SHORT_LAGS = range(5)
KAPPA = 0.1
THRESHOLDS = (0.5, 1.0)
# 004 Table 3 (App. H), short-range SDHs: (model, delta, head, E[S] on LongBench, OOD E[S]), as printed
PAPER_TABLE3 = [
    ("Gemma-7B", 0, "L0H4", 1.000, 1.000), ("Gemma-7B", 0, "L26H3", 1.000, 1.000), ("Gemma-7B", 0, "L27H8", 1.000, 1.000),
    ("Gemma-7B", 1, "L0H7", 0.904, 0.999), ("Gemma-7B", 1, "L19H13", 0.364, 0.741), ("Gemma-7B", 1, "L13H3", 0.333, 0.752),
    ("Gemma-7B", 2, "L0H1", 0.302, 0.352), ("Gemma-7B", 2, "L3H9", 0.148, 0.278), ("Gemma-7B", 2, "L2H2", 0.127, 0.298),
    ("Gemma-7B", 3, "L0H1", 0.197, 0.172), ("Gemma-7B", 3, "L2H9", 0.115, 0.144), ("Gemma-7B", 4, "L0H1", 0.101, 0.072),
    ("Llama3-8B-Instruct", 0, "L31H14", 0.961, 0.991), ("Llama3-8B-Instruct", 0, "L12H12", 0.698, 0.667),
    ("Llama3-8B-Instruct", 0, "L16H30", 0.539, 0.538), ("Llama3-8B-Instruct", 1, "L0H2", 0.560, 0.656),
    ("Llama3-8B-Instruct", 1, "L14H26", 0.516, 0.701), ("Llama3-8B-Instruct", 1, "L1H20", 0.333, 0.749),
    ("Llama3-8B-Instruct", 2, "L0H0", 0.180, 0.160), ("Llama3-8B-Instruct", 2, "L0H2", 0.169, 0.141),
    ("Llama3-8B-Instruct", 2, "L1H21", 0.165, 0.410), ("Llama3-8B-Instruct", 3, "L0H0", 0.159, 0.125),
    ("Llama3-8B-Instruct", 4, "L0H0", 0.109, 0.080),
    ("Qwen2.5-7B-Instruct", 0, "L18H7", 1.000, 1.000), ("Qwen2.5-7B-Instruct", 0, "L19H0", 1.000, 1.000),
    ("Qwen2.5-7B-Instruct", 0, "L14H25", 0.742, 0.800), ("Qwen2.5-7B-Instruct", 1, "L21H15", 0.699, 0.840),
    ("Qwen2.5-7B-Instruct", 1, "L13H13", 0.664, 0.904), ("Qwen2.5-7B-Instruct", 1, "L0H6", 0.655, 0.572),
    ("Qwen2.5-7B-Instruct", 2, "L1H3", 0.297, 0.327), ("Qwen2.5-7B-Instruct", 2, "L1H17", 0.200, 0.231),
    ("Qwen2.5-7B-Instruct", 2, "L0H5", 0.192, 0.100), ("Qwen2.5-7B-Instruct", 3, "L0H5", 0.161, 0.121),
    ("Qwen2.5-7B-Instruct", 3, "L1H17", 0.156, 0.165), ("Qwen2.5-7B-Instruct", 3, "L1H3", 0.154, 0.089),
    ("Qwen2.5-7B-Instruct", 4, "L1H0", 0.174, 0.205), ("Qwen2.5-7B-Instruct", 4, "L6H15", 0.114, 0.049),
    ("Qwen2.5-7B-Instruct", 4, "L1H17", 0.107, 0.098),
]


def paper_table() -> pd.DataFrame:
    """004 Table 3 as printed, with its ratio OOD / in-distribution."""
    df = pd.DataFrame(PAPER_TABLE3, columns=["model", "delta", "head", "slash_id", "slash_ood"])
    return df.assign(ratio=df.slash_ood / df.slash_id)


def per_prompt_scores(model, prompts: torch.Tensor, cfg: interp.ScanConfig) -> tuple[np.ndarray, interp.ScanResult]:
    """``([prompt, layer, head, lag])`` short-lag slash scores of each prompt alone, and the merged scan of all."""
    results = [interp.scan(model, p[None], cfg, prompt_ids=[i]) for i, p in enumerate(prompts)]
    per = np.stack([r.scores[..., : max(SHORT_LAGS) + 1].numpy() for r in results])
    return per, interp.merge_results(results)


def sdh_rows(id_scores: np.ndarray, ood_scores: np.ndarray, kappa: float = KAPPA) -> pd.DataFrame:
    """One row per (layer, head, delta) with ``id_scores[layer, head, delta] >= kappa``: both scores and their ratio.

    Args:
        id_scores, ood_scores: ``[layer, head, lag]`` mean slash scores over the in-distribution / OOD prompts.
    """
    layer, head, delta = np.nonzero(id_scores >= kappa)
    sid, sood = id_scores[layer, head, delta], ood_scores[layer, head, delta]
    return pd.DataFrame({"layer": layer, "head": head, "delta": delta, "slash_id": sid, "slash_ood": sood, "ratio": sood / sid})


def bootstrap_shares(per_id: np.ndarray, per_ood: np.ndarray, rows: pd.DataFrame, n_boot: int, seed: int) -> np.ndarray:
    """``[n_boot, len(THRESHOLDS)]`` shares of the SDHs in ``rows`` with ratio > each threshold, prompts resampled.

    Args:
        per_id, per_ood: ``[prompt, layer, head, lag]`` per-prompt scores (``per_prompt_scores``).
        rows: the SDHs (``sdh_rows`` on the means over all prompts); the set stays fixed.
    """
    rng = np.random.default_rng(seed)
    idx = (rows["layer"].to_numpy(), rows["head"].to_numpy(), rows["delta"].to_numpy())
    a, b = per_id[:, idx[0], idx[1], idx[2]], per_ood[:, idx[0], idx[1], idx[2]]  # [prompt, sdh]
    out = np.empty((n_boot, len(THRESHOLDS)))
    for i in range(n_boot):
        ra = a[rng.integers(0, len(a), len(a))].mean(0)
        rb = b[rng.integers(0, len(b), len(b))].mean(0)
        out[i] = [(rb / ra > t).mean() for t in THRESHOLDS]
    return out


def summarise(rows: pd.DataFrame, boot: np.ndarray | None, **extra) -> dict:
    """Shares with ratio > 0.5 / > 1 (with 95% bootstrap percentiles when ``boot`` is given) and the median ratio."""
    out = {**extra, "n_sdh": len(rows), "median_ratio": float(rows.ratio.median()) if len(rows) else np.nan}
    for k, t in enumerate(THRESHOLDS):
        name = f"share_gt_{t:g}".replace(".", "")
        out[name] = float((rows.ratio > t).mean()) if len(rows) else np.nan
        lo, hi = (np.percentile(boot[:, k], [2.5, 97.5]) if boot is not None and len(rows) else (np.nan, np.nan))
        out[f"{name}_lo"], out[f"{name}_hi"] = float(lo), float(hi)
    return out


def figure(df: pd.DataFrame, paper: pd.DataFrame) -> go.Figure:
    fig = go.Figure()
    for name, d in [*df.groupby("model", sort=False), *[(f"004: {m}", d) for m, d in paper.groupby("model", sort=False)]]:
        text = [f"L{l}H{h} delta {dl}" for l, h, dl in zip(d["layer"], d["head"], d["delta"])] if "layer" in d else \
            [f"{h} delta {dl}" for h, dl in zip(d["head"], d["delta"])]
        fig.add_trace(go.Box(y=d.ratio, name=name, boxpoints="all", jitter=0.4, pointpos=0, text=text,
                             marker_color="#888" if name.startswith("004") else "#1f77b4"))
    for t, dash in zip(THRESHOLDS, ("dot", "dash")):
        fig.add_hline(y=t, line_dash=dash, line_color="#d62728")  # (annotations land at log10(y) on log axes)
    fig.update_yaxes(type="log", title="slash score OOD / in-distribution")
    fig.update_layout(title="SDHs on random-token prompts (004 Fig. 3b): ours (blue, pydoc vs random) and 004 Table 3 (grey);<br>"
                      "red lines: ratio 0.5 (dotted) and 1 (dashed)",
                      showlegend=False, height=500, width=1100)
    return fig


def main(argv: list[str] | None = None) -> pd.DataFrame:
    ap = parser(__doc__, "tiny-llama, 2 + 2 prompts of 64 tokens, 200 resamples")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=1024)
    ap.add_argument("--boot", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--kappa", type=float, default=KAPPA, help="SDH threshold (004: 0.1; --quick uses 0.02 so that the "
                    "random-weight tiny model, whose lag-0 score is about 1/30 at 64 tokens, has rows)")
    args = ap.parse_args(argv)
    kappa = 0.02 if args.quick else args.kappa
    models = ["tiny-llama"] if args.quick else [m for m in args.models if interp.models.is_installed(m)]
    skipped = [m for m in args.models if m not in models] if not args.quick else []
    if skipped:
        print(f"not installed, skipped: {', '.join(skipped)} (see DESIGN: the zoo's optional models)")
    n_prompts, n_tokens, n_boot = (2, 64, 200) if args.quick else (args.prompts, args.tokens, args.boot)
    cfg = interp.ScanConfig(counterfactual_sinks=False)
    args.out.mkdir(parents=True, exist_ok=True)
    frames, summary = [], []
    for name in models:
        t0 = time.perf_counter()
        model = interp.load_model(name, device="cpu")
        per = {}
        for corpus in ("pydoc", "random"):
            p = interp.corpus.prompts(model, corpus, n_prompts, n_tokens, args.seed)
            per[corpus], _ = per_prompt_scores(model, p, cfg)
        rows = sdh_rows(per["pydoc"].mean(0), per["random"].mean(0), kappa).assign(model=name)
        boot = bootstrap_shares(per["pydoc"], per["random"], rows, n_boot, args.seed)
        secs = time.perf_counter() - t0
        summary.append(summarise(rows, boot, source="ours", model=name, kappa=kappa, n_prompts=n_prompts, tokens=n_tokens,
                                 seconds=round(secs, 1)))
        frames.append(rows[["model", "layer", "head", "delta", "slash_id", "slash_ood", "ratio"]])
        print(f"{name}: {len(rows)} SDHs, {summary[-1]['share_gt_05']:.2f} with ratio > 0.5 "
              f"[{summary[-1]['share_gt_05_lo']:.2f}, {summary[-1]['share_gt_05_hi']:.2f}], {secs:.0f} s", flush=True)
        del model
    df = pd.concat(frames, ignore_index=True)
    paper = paper_table()
    for m, d in paper.groupby("model", sort=False):
        summary.append(summarise(d, None, source="004 Table 3", model=m, kappa=KAPPA, n_prompts=500, tokens=6000, seconds=np.nan))
    df.to_csv(args.out / "ood_ratio.csv", index=False)
    pd.DataFrame(summary).to_csv(args.out / "ood_ratio_summary.csv", index=False)
    paper.to_csv(args.out / "ood_ratio_paper004.csv", index=False)
    save_figure(figure(df, paper), args.out, "ood_ratio")
    return df


if __name__ == "__main__":
    main()
