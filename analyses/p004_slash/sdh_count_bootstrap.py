"""How many slash-dominant heads, and their InP planes against the other heads', with bootstrap intervals over prompts.

An SDH is a head whose average slash score (004 Def. 3.1, eq. 6: the mean over prompts of each prompt's mean
``A[i, i - delta]``, positions 0..3 dropped) at its best lag in 0..4 is >= kappa = 0.1 (``is_sdh`` of ``interp
scan``; counted per head as in ``figures/compare_zoo_summary.csv``). The score is a mean of per-prompt means,
so scanning each prompt on its own (``interp.scan`` with one prompt) gives every prompt's ``[layer, head, lag]``
scores, and any resample of the prompts gives its scores exactly as a scan of those prompts would (equal-length
prompts). Each bootstrap replicate draws ``--prompts`` prompts with replacement (the draws of
``band_ablation.boot_index``, ``--boot`` replicates, seed 0), averages their scores and counts the SDHs again.

Also per replicate: the (head, lag) pairs with score >= kappa (the count of ``figures/ood_ratio_summary.csv``), and per
head the 95% interval of its best-lag score, which splits the SDHs into ``sdh_sure`` (interval above kappa) and the
heads whose interval holds kappa (``heads_straddling``: these make the count's spread).

Writes ``sdh_count_bootstrap.csv``: ``model, prompts, tokens, heads, sdh_count, sdh_lo, sdh_hi, sdh_boot_mean,
pairs, pairs_lo, pairs_hi, sdh_sure, heads_straddling, sdh_lag0 .. sdh_lag4, boot, seconds`` (``lo`` / ``hi``:
2.5 and 97.5 percentiles of the replicates).

InP planes (004 Sec. 4, App. D.3; the same scan, ``ScanConfig(inp=True)``): per head the mean |InP| of every rotation
plane over all visible pairs (``interp.measures.inp.means``), its active planes (mean |InP| >= 0.1 x the head's
largest, ``active_planes``), how many fall in each band (``band_counts``: planes split in three, high / medium / low
frequency) and the plane of largest mean |InP| (``top_plane``, 0 = highest frequency). ``pulse_check.csv`` has these
for the SDHs only; here for every head (``inp_planes_heads.csv``) and per model and group (SDHs, other heads) in
``inp_planes_summary.csv``: ``model, group, heads, planes``, the means of ``active_high``, ``active_medium``,
``active_low``, ``n_active``, the median ``top_plane`` and the share of heads whose top plane is in the low band
(``top_low_share``), each with ``_lo`` / ``_hi`` (95% bootstrap over prompts, the same draws: each replicate pools the
drawn prompts' |InP| sums and pair counts, as a scan of those prompts would, and recomputes every head's active planes;
the groups stay those of the full sample), and ``diff_active_high`` (SDHs minus other heads) with its interval.

8 pydoc prompts x 1024 tokens per model by default (the prompts of ``compare_zoo.py`` and ``inp_pulse.py``, so
``sdh_count`` is the count quoted from ``compare_zoo_summary.csv`` and the SDH rows of ``inp_planes_heads.csv`` are
those of ``pulse_check.csv``).

    python -m analyses.p004_slash.sdh_count_bootstrap [--models ...] [--prompts 8] [--tokens 1024] [--boot 10000] [--quick] [--out DIR]
"""

from __future__ import annotations

import time

import numpy as np
import pandas as pd
import torch

import interp
from interp.measures import inp as freq

from analyses._common import parser
from analyses.p004_slash.band_ablation import boot_index, interval

LAGS = 5  # short lags 0..4
KAPPA = 0.1
CHUNK = 1000  # replicates per matrix product (memory: CHUNK x layer x head x lag float64)


def per_prompt_scans(model, prompts, cfg) -> tuple[dict[str, np.ndarray], interp.ScanResult]:
    """Each prompt scanned alone: ``slash [prompt, layer, head, lag]`` short-lag slash scores and, with ``cfg.inp``, the
    InP sums ``inp_signed``, ``inp_abs [prompt, layer, head, plane]`` and ``inp_pairs [prompt, layer, head]``; and the merged scan of all."""
    results = [interp.scan(model, p[None], cfg, prompt_ids=[i]) for i, p in enumerate(prompts)]
    per = {"slash": np.stack([r.scores[..., :LAGS].numpy() for r in results])}
    if cfg.inp:
        for k in ("inp_signed", "inp_abs", "inp_pairs"):
            per[k] = np.stack([r.state[k].numpy() for r in results])
    return per, interp.merge_results(results)


def weights(idx: np.ndarray, n: int) -> np.ndarray:
    """``[reps, n]``: the share of each replicate's draws that are prompt p (``idx`` ``[reps, draws]`` prompt indices)."""
    w = np.zeros((len(idx), n))
    np.add.at(w, (np.arange(len(idx))[:, None], idx), 1.0 / idx.shape[1])
    return w


def boot_scores(per: np.ndarray, idx: np.ndarray):
    """Yield ``[chunk, layer, head, lag]`` mean scores of the resampled prompts, ``CHUNK`` replicates at a time.

    Args:
        per: ``[prompt, layer, head, lag]`` per-prompt scores; idx: ``[reps, prompt]`` drawn prompt indices.
    """
    n = per.shape[0]
    flat = per.reshape(n, -1)
    for s in range(0, len(idx), CHUNK):
        part = idx[s:s + CHUNK]
        yield (weights(part, n) @ flat).reshape(len(part), *per.shape[1:])


def count_table(per: np.ndarray, idx: np.ndarray, kappa: float = KAPPA) -> dict:
    """SDH count of the mean of ``per`` with bootstrap intervals (module docstring); ``per`` as in ``boot_scores``."""
    mean = per.mean(0)
    best = mean.max(-1)  # [layer, head]
    counts, pairs, best_reps = [], [], []
    for s in boot_scores(per, idx):
        b = s.max(-1)
        counts.append((b >= kappa).sum((1, 2)))
        pairs.append((s >= kappa).sum((1, 2, 3)))
        best_reps.append(b)
    counts, pairs, best_reps = np.concatenate(counts), np.concatenate(pairs), np.concatenate(best_reps)
    head_lo, head_hi = np.percentile(best_reps, [2.5, 97.5], axis=0)
    is_sdh = best >= kappa
    arg = mean.argmax(-1)
    out = {"heads": best.size, "sdh_count": int(is_sdh.sum())}
    out["sdh_lo"], out["sdh_hi"] = interval(counts)
    out["sdh_boot_mean"] = float(counts.mean())
    out["pairs"] = int((mean >= kappa).sum())
    out["pairs_lo"], out["pairs_hi"] = interval(pairs)
    out["sdh_sure"] = int((head_lo >= kappa).sum())
    out["heads_straddling"] = int(((head_lo < kappa) & (head_hi >= kappa)).sum())
    out.update({f"sdh_lag{d}": int((is_sdh & (arg == d)).sum()) for d in range(LAGS)})
    return out


def band_active(active: np.ndarray) -> np.ndarray:
    """``[..., 3]`` active planes per band (high, medium, low) of ``active [..., plane]`` (``interp.measures.inp.band_counts``'
    split, for many heads at once)."""
    return np.stack([active[..., i].sum(-1) for i in np.array_split(np.arange(active.shape[-1]), 3)], axis=-1)


def plane_stats(mean_abs: np.ndarray) -> dict[str, np.ndarray]:
    """Per head (any leading axes) from mean |InP| ``[..., plane]``: ``active_high/_medium/_low``, ``n_active``, ``top_plane``
    and ``top_low`` (top plane in the low band)."""
    act = freq.active_planes(torch.from_numpy(mean_abs)).numpy()
    bands = band_active(act)
    top = np.nan_to_num(mean_abs, nan=-np.inf).argmax(-1)
    low_start = np.array_split(np.arange(mean_abs.shape[-1]), 3)[2][0]
    return {"active_high": bands[..., 0], "active_medium": bands[..., 1], "active_low": bands[..., 2], "n_active": act.sum(-1),
            "top_plane": top, "top_low": top >= low_start}


GROUP_STATS = ["active_high", "active_medium", "active_low", "n_active"]


def group_summary(stats: dict[str, np.ndarray], sdh: np.ndarray) -> dict[str, dict[str, np.ndarray]]:
    """Per group (``SDHs``, ``other heads``): means of ``GROUP_STATS``, median ``top_plane`` and ``top_low_share``, over the
    heads (last two axes ``[layer, head]``; leading axes kept, e.g. replicates)."""
    out = {}
    for group, mask in (("SDHs", sdh), ("other heads", ~sdh)):
        g = {k: stats[k][..., mask].mean(-1) for k in GROUP_STATS}
        g["top_plane"] = np.median(stats["top_plane"][..., mask], axis=-1)
        g["top_low_share"] = stats["top_low"][..., mask].mean(-1)
        out[group] = g
    return out


def inp_tables(name: str, per: dict[str, np.ndarray], sdh: np.ndarray, idx: np.ndarray) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(heads, summary)``: ``inp_planes_heads.csv`` rows of one model and its ``inp_planes_summary.csv`` rows (module
    docstring); ``sdh`` ``[layer, head]`` the full sample's SDHs, ``idx`` the bootstrap draws."""
    A, C = per["inp_abs"], per["inp_pairs"]
    full = plane_stats(A.sum(0) / np.where(C.sum(0) > 0, C.sum(0), np.nan)[..., None])
    L, H = sdh.shape
    heads = pd.DataFrame({"model": name, "layer": np.repeat(np.arange(L), H), "head": np.tile(np.arange(H), L), "is_sdh": sdh.ravel(),
                          **{k: v.ravel() for k, v in full.items()}})
    reps = {g: {k: [] for k in [*GROUP_STATS, "top_plane", "top_low_share"]} for g in ("SDHs", "other heads")}
    diff = []
    n = len(A)
    for s in range(0, len(idx), CHUNK):
        w = weights(idx[s:s + CHUNK], n)
        a = (w @ A.reshape(n, -1)).reshape(len(w), *A.shape[1:])
        c = (w @ C.reshape(n, -1)).reshape(len(w), *C.shape[1:])
        g = group_summary(plane_stats(a / np.where(c > 0, c, np.nan)[..., None]), sdh)
        for grp in reps:
            for k in reps[grp]:
                reps[grp][k].append(g[grp][k])
        diff.append(g["SDHs"]["active_high"] - g["other heads"]["active_high"])
    point = group_summary(full, sdh)
    d_lo, d_hi = interval(np.concatenate(diff))
    rows = []
    for grp, mask in (("SDHs", sdh), ("other heads", ~sdh)):
        row = {"model": name, "group": grp, "heads": int(mask.sum()), "planes": A.shape[-1]}
        for k, v in point[grp].items():
            row[k] = float(v)
            row[f"{k}_lo"], row[f"{k}_hi"] = interval(np.concatenate(reps[grp][k]))
        row["diff_active_high"] = float(point["SDHs"]["active_high"] - point["other heads"]["active_high"])
        row["diff_active_high_lo"], row["diff_active_high_hi"] = d_lo, d_hi
        rows.append(row)
    return heads, pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> pd.DataFrame:
    ap = parser(__doc__, "tiny-llama, 3 random-token prompts x 64 tokens, kappa 0.045, 200 replicates")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=1024)
    ap.add_argument("--boot", type=int, default=10000)
    ap.add_argument("--seed", type=int, default=0, help="selects the pydoc windows (0: those of compare_zoo.py)")
    args = ap.parse_args(argv)
    models = ["tiny-llama"] if args.quick else [m for m in args.models if interp.models.is_installed(m)]
    skipped = [] if args.quick else [m for m in args.models if m not in models]
    if skipped:
        print(f"not installed, skipped: {', '.join(skipped)} (see DESIGN: the zoo's optional models)")
    n, t, reps = (3, 64, 200) if args.quick else (args.prompts, args.tokens, args.boot)
    kappa = 0.045 if args.quick else KAPPA  # random-weight tiny-llama: best scores 0.041-0.048 at 64 tokens, split 4 / 4
    cfg = interp.ScanConfig(counterfactual_sinks=False, kappa=kappa, inp=True)
    args.out.mkdir(parents=True, exist_ok=True)
    rows, inp_heads, inp_summary = [], [], []
    for name in models:
        t0 = time.perf_counter()
        model = interp.load_model(name, device="cpu")
        prompts = interp.corpus.prompts(model, "random" if args.quick else "pydoc", n, t, args.seed)
        per, merged = per_prompt_scans(model, prompts, cfg)
        idx = boot_index(n, reps)
        row = {"model": name, "prompts": n, "tokens": t, **count_table(per["slash"], idx, kappa)}
        if row["sdh_count"] != int(merged.heads["is_sdh"].sum()):
            raise RuntimeError(f"{name}: the per-prompt means give another SDH count than the merged scan's is_sdh")
        sdh = merged.heads.sort_values(["layer", "head"])["is_sdh"].to_numpy().reshape(merged.scores.shape[:2])
        h, summ = inp_tables(name, per, sdh, idx)
        inp_heads.append(h)
        inp_summary.append(summ.assign(prompts=n, tokens=t, boot=reps))
        row.update(boot=reps, seconds=round(time.perf_counter() - t0, 1))
        rows.append(row)
        print(f"{name}: {row['sdh_count']} SDHs [{row['sdh_lo']:.0f}, {row['sdh_hi']:.0f}], {row['heads_straddling']} heads straddle "
              f"kappa, {row['seconds']:.0f} s", flush=True)
        del model
    df = pd.DataFrame(rows)
    df.to_csv(args.out / "sdh_count_bootstrap.csv", index=False)
    pd.concat(inp_heads, ignore_index=True).to_csv(args.out / "inp_planes_heads.csv", index=False)
    summ = pd.concat(inp_summary, ignore_index=True)
    summ.to_csv(args.out / "inp_planes_summary.csv", index=False)
    print(summ[["model", "group", "heads", "active_high", "active_high_lo", "active_high_hi", "active_medium", "active_low",
                "top_plane", "top_low_share"]].to_string(index=False, float_format=lambda v: f"{v:.2f}"))
    return df


if __name__ == "__main__":
    main()
