"""Paper 004 Table 5 and Fig. 8 on the zoo models: slash-dominant heads with a band of RoPE planes unrotated.

For each installed model (``smollm2-135m``, ``gemma-3-270m``, ``qwen2.5-coder-0.5b``): one scan of pydoc
prompts with the three band ablations recomputed in the streaming engine (``interp ablate``'s scan),
then

- ``figures/band_ablation_table5.csv``: like 004 Table 5, for each lag 0..4 the top three SDHs by
  original slash score with their scores without the high / medium / low band;
- ``figures/band_ablation_fig8.png`` (+ ``.html``): like 004 Fig. 8, box plots of ablated / original per
  band and model, over all SDHs; Gemma-3's sliding-window layers (base 1e4) and global layers (base 1e6)
  are separate groups because their frequencies differ;
- ``figures/band_ablation_summary.csv``: median and mean ratio per (model, layer type, band), with a
  bootstrap interval of the median (``median_lo``, ``median_hi``: 95% percentile interval over prompts,
  ``BOOT`` resamples, seed 0; the SDHs and their lags stay those of the full sample, each resample
  re-averages every SDH's per-prompt scores and takes the median ratio again);
- ``figures/band_ablation_causal.csv`` (``--no-causal`` skips it), the model itself run with each band unrotated
  in all layers (``interp.hooks.intervene.rope_intervention``): mean next-token NLL in nats per predicted
  token, ``nll_original``, ``nll``, ``delta_nll`` (the numbers of ``causal_ablation``'s summary, computed per
  prompt with the same ``mean_nll``) and a 95% bootstrap interval of ``delta_nll`` over prompts
  (``delta_lo``, ``delta_hi``; paired: each resample takes the same prompts with and without the band).

Each prompt is scanned on its own and the scans are merged (``interp.merge_results``: the sums add exactly),
so the per-prompt scores the bootstrap needs come from the same run as the tables.

    python -m analyses.p004_slash.band_ablation [--prompts 8] [--tokens 1024] [--no-causal] [--quick] [--out figures]
    python -m analyses.p004_slash.band_ablation --causal-only [--models ...]   # only the causal tables, rows of these models replaced
    python -m analyses.p004_slash.band_ablation --dose matched [--models ...]  # 004's share of each band (band_dose.csv), own tables

``--dose matched`` leaves ``matched_removed`` planes of each band unrotated (``figures/band_dose.csv``: the share of the
band 004 removes, 6 of 21-22 planes) instead of six, so the 32-plane and 128-plane models get the paper's dose; it writes
``band_ablation_matched_heads.csv`` and ``band_ablation_matched_summary.csv`` (counterfactual scores only);
``--dose matched --causal-only`` runs the causal NLL pass at that dose instead, into
``band_ablation_matched_causal.csv`` (+ ``_prompts``; the same columns as the six-plane causal tables, plus ``n_remove``).

    python -m analyses.p004_slash.band_ablation --dose matched --causal-only [--models ...]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import torch

import interp
from interp.experiments.ablation import band_ablation_table, band_variants
from interp.hooks.intervene import mean_nll, rope_intervention
from interp.rope import band_ablation

from analyses._common import FIGURES, MODELS, installed, parser, save_figure

BANDS = ["wo_high", "wo_medium", "wo_low"]
BOOT = 10000  # bootstrap resamples (percentile intervals, numpy seed 0)


def boot_index(n: int, reps: int = BOOT, seed: int = 0) -> np.ndarray:
    """``[reps, n]`` prompt indices drawn with replacement (the same draws for every statistic of a model)."""
    return np.random.default_rng(seed).integers(0, n, size=(reps, n))


def interval(values: np.ndarray) -> tuple[float, float]:
    """95% percentile interval of bootstrap replicates."""
    lo, hi = np.nanpercentile(values, [2.5, 97.5])
    return float(lo), float(hi)


def layer_type(model, layer: int) -> str:
    """``"sliding"`` / ``"global"`` for models with both kinds of layer, else ``"all"``."""
    w = model.card.sliding_window
    if all(x is None for x in w) or all(x is not None for x in w):
        return "all"
    return "sliding" if w[layer] is not None else "global"


def per_prompt_scores(res: interp.ScanResult, variants) -> dict[str, np.ndarray]:
    """``[layer, head, delta]`` slash scores of a one-prompt scan: ``original`` and one entry per variant."""
    out = {"original": res.scores.numpy()}
    for v in variants:
        out[v.name] = res.variant_scores(v.name).numpy()
    return out


def boot_ratio_medians(table: pd.DataFrame, scores: list[dict[str, np.ndarray]], idx: np.ndarray) -> pd.DataFrame:
    """Bootstrap replicates of the median ratio per (layer type, band): ``[reps]`` per row, as a tidy frame.

    ``scores[p][name][l, h, d]`` are prompt p's scores; each replicate averages the SDHs' scores over the drawn
    prompts (all prompts have the same length, so this is the scan's mean over prompts) and takes the median of
    ablated / original over the SDHs of each layer type.
    """
    l, h, d = table["layer"].to_numpy(), table["head"].to_numpy(), table["delta"].to_numpy().astype(int)
    per = {k: np.stack([s[k][l, h, d] for s in scores]) for k in ["original", *BANDS]}  # [prompt, sdh]
    orig = per["original"][idx].mean(1)  # [reps, sdh]
    rows = []
    for t in sorted(table["layer_type"].unique()):
        m = (table["layer_type"] == t).to_numpy()
        for b in BANDS:
            rep = np.median(per[b][idx].mean(1)[:, m] / orig[:, m], axis=1)
            rows.append({"layer_type": t, "band": b, "reps": rep})
    return pd.DataFrame(rows)


def causal_nll(model, prompts, variants) -> pd.DataFrame:
    """Per prompt: next-token NLL of the model as is and with each variant in all layers (``mean_nll`` per prompt)."""
    rows = []
    for i, p in enumerate(prompts):
        row = {"prompt": i, "original": mean_nll(model, [p])}
        for v in variants:
            with rope_intervention(model, v):
                row[v.name] = mean_nll(model, [p])
        rows.append(row)
    return pd.DataFrame(rows)


def causal_summary(per: pd.DataFrame, idx: np.ndarray, n_tokens: int) -> pd.DataFrame:
    """``band, layers, prompts, tokens, nll_original, nll, delta_nll, delta_lo, delta_hi`` (equal-length prompts:
    the token-weighted mean of ``causal_ablation`` is the mean of the per-prompt means)."""
    rows = []
    o = per["original"].to_numpy()
    for b in BANDS:
        x = per[b].to_numpy()
        lo, hi = interval((x - o)[idx].mean(1))
        rows.append({"band": b, "layers": "all", "prompts": len(per), "tokens": n_tokens, "nll_original": o.mean(),
                     "nll": x.mean(), "delta_nll": (x - o).mean(), "delta_lo": lo, "delta_hi": hi})
    return pd.DataFrame(rows)


def matched_variants(name: str, n_freq: int, dose: pd.DataFrame) -> tuple:
    """The three band ablations of ``name`` at the matched dose: per band the ``matched_removed`` planes of
    ``figures/band_dose.csv`` (the paper's share of the band), evenly spaced as ``interp.rope.band_planes`` picks them."""
    rows = dose[dose["model"] == name].set_index("band")
    if rows.empty or int(rows["n_planes"].iloc[0]) != n_freq:
        raise SystemExit(f"{name}: no matched dose for {n_freq} planes in band_dose.csv; run python -m analyses.p004_slash.band_dose")
    return tuple(band_ablation(n_freq, b.removeprefix("wo_"), int(rows.at[b.removeprefix("wo_"), "matched_removed"])) for b in BANDS)


def run_model(name: str, prompts: int, tokens: int, causal: bool, dose: pd.DataFrame | None = None) -> dict:
    """Scan ``name`` with the three band ablations (six planes per band, or the matched dose of ``dose``), the
    bootstrap replicates, and with ``causal`` the causal NLL table."""
    model = interp.load_model(name, device="cpu")
    p = interp.corpus.prompts(model, "pydoc", prompts, tokens)
    n_freq = model.card.n_rotary_planes
    variants = band_variants(n_freq) if dose is None else matched_variants(name, n_freq, dose)
    cfg = interp.ScanConfig(variants=variants)
    t0 = time.perf_counter()
    one = [interp.scan(model, [p[i]], cfg, meta={"corpus": "pydoc"}, prompt_ids=[i]) for i in range(len(p))]
    res = interp.merge_results(one)
    t_scan = time.perf_counter() - t0
    table = band_ablation_table(res)
    table.insert(0, "model", name)
    table.insert(1, "layer_type", [layer_type(model, l) for l in table["layer"]])
    idx = boot_index(len(p))
    boot = boot_ratio_medians(table, [per_prompt_scores(r, cfg.variants) for r in one], idx).assign(model=name)
    out = {"table": table, "boot": boot, "seconds": t_scan, "n_heads": model.card.n_layers * model.card.n_heads}
    if causal:
        t0 = time.perf_counter()
        per = causal_nll(model, p, cfg.variants)
        out["causal"] = causal_summary(per, idx, int(p[0].numel())).assign(model=name)
        out["causal_prompts"] = per.assign(model=name)
        out["causal_seconds"] = time.perf_counter() - t0
    return out


CAUSAL_COLUMNS = ["model", "band", "layers", "prompts", "tokens", "nll_original", "nll", "delta_nll", "delta_lo", "delta_hi"]


def write_causal(out_dir: Path, summary: pd.DataFrame, per_prompt: pd.DataFrame, replace_rows: bool = False,
                 stem: str = "band_ablation_causal") -> pd.DataFrame:
    """Write ``{stem}.csv`` and ``{stem}_prompts.csv`` (default: the six-plane tables); with ``replace_rows`` keep the rows of
    other models already in ``out_dir`` (models in the order of ``_common.MODELS``)."""
    summary = summary[CAUSAL_COLUMNS + [c for c in ("n_remove",) if c in summary]]
    per_prompt = per_prompt[["model", "prompt", "original", *BANDS]]
    if replace_rows:
        for name, new in ((f"{stem}.csv", "summary"), (f"{stem}_prompts.csv", "per_prompt")):
            f = out_dir / name
            if f.exists():
                old = pd.read_csv(f)
                cur = summary if new == "summary" else per_prompt
                cur = pd.concat([old[~old["model"].isin(cur["model"])], cur], ignore_index=True)
                order = {m: i for i, m in enumerate(MODELS)}
                cur = cur.sort_values("model", key=lambda c: c.map(order), kind="stable").reset_index(drop=True)
                if new == "summary":
                    summary = cur
                else:
                    per_prompt = cur
    summary.round(5).to_csv(out_dir / f"{stem}.csv", index=False)
    per_prompt.round(5).to_csv(out_dir / f"{stem}_prompts.csv", index=False)
    return summary


def causal_only(args) -> dict:
    """``--causal-only``: the causal NLL table of each of ``--models`` (no scans), merged into the tables in ``--out``;
    with ``--dose matched`` at 004's share of each band (``band_dose.csv``), into ``band_ablation_matched_causal*.csv``."""
    args.out.mkdir(parents=True, exist_ok=True)
    dose = pd.read_csv(FIGURES / "band_dose.csv") if args.dose == "matched" else None
    sums, pers = [], []
    for name in installed(args.models):
        t0 = time.perf_counter()
        model = interp.load_model(name, device="cpu")
        p = interp.corpus.prompts(model, "pydoc", args.prompts, args.tokens)
        n_freq = model.card.n_rotary_planes
        variants = band_variants(n_freq) if dose is None else matched_variants(name, n_freq, dose)
        per = causal_nll(model, p, variants).assign(model=name)
        s = causal_summary(per, boot_index(len(p)), int(p[0].numel())).assign(model=name)
        sums.append(s.assign(n_remove=[len(v.planes) for v in variants]))
        pers.append(per)
        print(f"{name}: causal {time.perf_counter() - t0:.1f} s", flush=True)
    stem = "band_ablation_causal" if dose is None else "band_ablation_matched_causal"
    c = write_causal(args.out, pd.concat(sums, ignore_index=True), pd.concat(pers, ignore_index=True), replace_rows=True, stem=stem)
    print(c.to_string(index=False, float_format=lambda v: f"{v:.4f}"), flush=True)
    return {"causal": c}


def table5(table: pd.DataFrame, top: int = 3) -> pd.DataFrame:
    """Top ``top`` SDHs per (model, lag) with their ablated scores (004 Table 5's layout)."""
    rows = table.sort_values("original", ascending=False).groupby(["model", "delta"], sort=True).head(top)
    rows = rows.assign(head_name=[f"L{l}H{h}" for l, h in zip(rows["layer"], rows["head"])])
    return rows[["model", "layer_type", "delta", "head_name", "original", *BANDS]].sort_values(["model", "delta", "original"], ascending=[True, True, False])


def summary(table: pd.DataFrame, boot: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per (model, layer type, band): SDHs, median / mean ratio, share below 0.9, and with ``boot`` (the replicates
    of ``boot_ratio_medians``) the 95% bootstrap interval of the median (``median_lo``, ``median_hi``)."""
    g = table.groupby(["model", "layer_type"])
    rows = []
    for (m, t), df in g:
        for b in BANDS:
            r = df[f"ratio_{b}"]
            row = {"model": m, "layer_type": t, "band": b, "sdh": len(df), "median_ratio": r.median(), "mean_ratio": r.mean(),
                   "frac_below_0.9": (r < 0.9).mean()}
            if boot is not None:
                rep = boot[(boot["model"] == m) & (boot["layer_type"] == t) & (boot["band"] == b)]["reps"].iloc[0]
                row["median_lo"], row["median_hi"] = interval(rep)
            rows.append(row)
    return pd.DataFrame(rows)


def fig8(table: pd.DataFrame) -> go.Figure:
    fig = go.Figure()
    groups = [(m, t) for (m, t), _ in table.groupby(["model", "layer_type"])]
    for b, color in zip(BANDS, ["#d62728", "#ff7f0e", "#2ca02c"]):
        x, y = [], []
        for m, t in groups:
            df = table[(table["model"] == m) & (table["layer_type"] == t)]
            label = m if t == "all" else f"{m} ({t})"
            x += [f"{label}<br>{len(df)} SDHs"] * len(df)
            y += list(df[f"ratio_{b}"])
        fig.add_trace(go.Box(x=x, y=y, name=b.replace("wo_", "without "), marker_color=color, boxpoints="all", jitter=0.3, pointpos=0))
    fig.add_hline(y=1.0, line_dash="dot", line_color="grey")
    fig.update_layout(boxmode="group", yaxis_title="slash score ablated / original", height=480, width=980,
                      title="SDHs with six planes of one band unrotated (analogue of paper 004, Fig. 8)")
    return fig


def matched_dose(args) -> dict:
    """``--dose matched``: the counterfactual band ablation at 004's share of each band (``band_dose.csv``), written to
    ``band_ablation_matched_heads.csv`` and ``band_ablation_matched_summary.csv`` (with ``n_remove`` per band)."""
    dose = pd.read_csv(FIGURES / "band_dose.csv")
    tables, boots = [], []
    for name in installed(args.models):
        r = run_model(name, args.prompts, args.tokens, causal=False, dose=dose)
        tables.append(r["table"])
        boots.append(r["boot"])
        print(f"{name}: {len(r['table'])} SDHs; matched-dose scan {r['seconds']:.1f} s", flush=True)
    table = pd.concat(tables, ignore_index=True)
    table.round(5).to_csv(args.out / "band_ablation_matched_heads.csv", index=False)
    s = summary(table, pd.concat(boots, ignore_index=True))
    n_remove = dose.assign(band="wo_" + dose["band"])[["model", "band", "matched_removed", "matched_share_of_band"]]
    s = s.merge(n_remove.rename(columns={"matched_removed": "n_remove", "matched_share_of_band": "share_of_band"}),
                on=["model", "band"], how="left")
    s.round(4).to_csv(args.out / "band_ablation_matched_summary.csv", index=False)
    print(s.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    return {"table": table, "summary": s}


def main(argv: list[str] | None = None) -> dict:
    ap = parser(__doc__, "smollm2-135m only, 2 prompts x 256 tokens (for tests)")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=1024)
    ap.add_argument("--causal", action=argparse.BooleanOptionalAction, default=True,
                    help="also the causal ablation (band_ablation_causal.csv; default on, --no-causal skips it)")
    ap.add_argument("--threads", type=int, default=torch.get_num_threads(), help="torch threads")
    ap.add_argument("--causal-only", action="store_true",
                    help="only the causal ablation of --models, replacing their rows in the causal tables in --out (no scans)")
    ap.add_argument("--dose", choices=["six", "matched"], default="six",
                    help="planes per band: six in every model (004's count), or 'matched' (004's share of each band, "
                         "figures/band_dose.csv) into band_ablation_matched_{heads,summary}.csv, counterfactual only")
    args = ap.parse_args(argv)
    if args.quick:
        args.models, args.prompts, args.tokens = ["smollm2-135m"], 2, 256
    args.out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(args.threads)
    if args.causal_only:
        return causal_only(args)
    if args.dose == "matched":
        return matched_dose(args)
    tables, boots, causal, causal_prompts = [], [], [], []
    for name in installed(args.models):
        r = run_model(name, args.prompts, args.tokens, args.causal)
        tables.append(r["table"])
        boots.append(r["boot"])
        msg = f"{name}: {len(r['table'])} SDHs of {r['n_heads']} heads; scan with 3 band ablations {r['seconds']:.1f} s"
        if "causal" in r:
            causal.append(r["causal"])
            causal_prompts.append(r["causal_prompts"])
            msg += f"; causal {r['causal_seconds']:.1f} s"
        print(msg, flush=True)
    table = pd.concat(tables, ignore_index=True)
    table.round(5).to_csv(args.out / "band_ablation_heads.csv", index=False)
    t5 = table5(table)
    t5.round(4).to_csv(args.out / "band_ablation_table5.csv", index=False)
    s = summary(table, pd.concat(boots, ignore_index=True))
    s.round(4).to_csv(args.out / "band_ablation_summary.csv", index=False)
    print(s.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    save_figure(fig8(table), args.out, "band_ablation_fig8")
    out = {"table": table, "table5": t5, "summary": s}
    if causal:
        c = write_causal(args.out, pd.concat(causal, ignore_index=True), pd.concat(causal_prompts, ignore_index=True))
        print(c.to_string(index=False, float_format=lambda v: f"{v:.4f}"))
        out["causal"] = c
    return out


if __name__ == "__main__":
    main()
