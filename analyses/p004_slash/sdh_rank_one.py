"""Are slash-dominant heads' pre-RoPE queries and keys nearly rank one (004 Sec. 3.2, Figs. 5-6; claim 004d)? With
bootstrap intervals over prompts.

004 measures ``r1 = s_1^2 / sum_i s_i^2`` (eq. 7: the share of the largest singular value's energy, not centred) of a
head's pre-RoPE queries ``Q`` and keys ``K`` and reports that SDHs have ``r1`` above 0.9 for ``Q`` or ``K``. ``r1`` is a
function of the Gram matrix ``X^T X`` (its largest eigenvalue over its trace), and the Gram matrix of several prompts'
vectors is the sum of the prompts' Gram matrices. So scanning each prompt alone (``interp.scan`` with one prompt: its
``gram_q_pre [layer, head, d_head, d_head]`` and ``gram_k_pre [layer, kv_head, d_head, d_head]`` states and its short-lag
slash scores) gives, for any resample of the prompts, exactly what a scan of those prompts would: the pooled Gram
matrices, hence every head's ``r1``, and the mean slash scores, hence which heads are SDHs (best lag in 0..4 at least
``kappa`` = 0.1, 004 Def. 3.1). Each replicate (``--boot``, the draws of ``band_ablation.boot_index``, seed 0) re-selects
the SDHs and recomputes ``r1``, so the intervals carry both sources of variation.

Key ``r1`` belongs to a kv head and is counted on every query head of its group (as ``interp scan``'s ``r1_k`` column).

Writes ``sdh_rank_one.csv``, one row per model and statistic: ``model, prompts, tokens, statistic, value, lo, hi, boot``
(``lo`` / ``hi``: 2.5 and 97.5 percentiles of the replicates) with statistics

- ``sdh_count``, ``r1_q_sdh``, ``r1_q_other``, ``r1_q_all``, ``r1_q_diff`` (mean over SDHs minus mean over the other
  heads), and the same for ``k``;
- ``share_q_gt_0.9``, ``share_k_gt_0.9``, ``share_qk_gt_0.9`` (share of SDHs with ``r1`` above 0.9 for Q, for K, for Q or
  K: 004's cut) and ``share_qk_gt_0.9_other`` (the same share among the other heads).

8 pydoc prompts x 1024 tokens per model by default (the prompts of ``compare_zoo.py`` and ``sdh_count_bootstrap.py``).

    python -m analyses.p004_slash.sdh_rank_one [--models ...] [--prompts 8] [--tokens 1024] [--boot 2000] [--quick] [--out DIR]
"""

from __future__ import annotations

import time

import numpy as np
import pandas as pd
import torch

import interp
from interp.measures.base import kv_index
from interp.measures.spectrum import spectrum_metrics

from analyses._common import parser, write_rows
from analyses.p004_slash.band_ablation import boot_index, interval
from analyses.p004_slash.sdh_count_bootstrap import KAPPA, LAGS, weights

CUT = 0.9  # 004 Sec. 3.2: "r1 above 0.9"
CHUNK = 16  # replicates per pooled Gram batch (memory: CHUNK x layer x head x d_head^2 float64)


def per_prompt(model, prompts, cfg) -> dict[str, np.ndarray]:
    """Each prompt scanned alone: ``slash [prompt, layer, head, lag]``, ``gq [prompt, layer, head, d, d]`` and
    ``gk [prompt, layer, kv_head, d, d]`` (pre-RoPE Gram sums, float64)."""
    out = {"slash": [], "gq": [], "gk": []}
    for i, p in enumerate(prompts):
        r = interp.scan(model, p[None], cfg, prompt_ids=[i])
        out["slash"].append(r.scores[..., :LAGS].double().numpy())
        out["gq"].append(r.state["gram_q_pre"].double().numpy())
        out["gk"].append(r.state["gram_k_pre"].double().numpy())
    return {k: np.stack(v) for k, v in out.items()}


def statistics(slash: np.ndarray, gq: np.ndarray, gk: np.ndarray, kv: np.ndarray, kappa: float) -> dict[str, np.ndarray]:
    """The module docstring's statistics from pooled states with any leading axes (replicates).

    Args:
        slash: ``[..., layer, head, lag]`` mean slash scores; gq: ``[..., layer, head, d, d]`` and gk:
            ``[..., layer, kv_head, d, d]`` pooled pre-RoPE Gram matrices; kv: ``[head]`` the kv head of each query head;
        kappa: the SDH threshold.
    Returns:
        statistic name -> ``[...]`` values (NaN where a group is empty).
    """
    sdh = slash.max(-1) >= kappa  # [..., layer, head]
    r1 = {"q": spectrum_metrics(torch.from_numpy(gq))["r1"].numpy(),
          "k": spectrum_metrics(torch.from_numpy(gk))["r1"].numpy()[..., kv]}
    n_sdh, n_other = sdh.sum((-2, -1)), (~sdh).sum((-2, -1))
    with np.errstate(invalid="ignore", divide="ignore"):
        out = {"sdh_count": n_sdh.astype(float)}
        for x, v in r1.items():
            out[f"r1_{x}_sdh"] = (v * sdh).sum((-2, -1)) / n_sdh
            out[f"r1_{x}_other"] = (v * ~sdh).sum((-2, -1)) / n_other
            out[f"r1_{x}_all"] = v.mean((-2, -1))
            out[f"r1_{x}_diff"] = out[f"r1_{x}_sdh"] - out[f"r1_{x}_other"]
            out[f"share_{x}_gt_{CUT}"] = ((v > CUT) & sdh).sum((-2, -1)) / n_sdh
        either = (r1["q"] > CUT) | (r1["k"] > CUT)
        out[f"share_qk_gt_{CUT}"] = (either & sdh).sum((-2, -1)) / n_sdh
        out[f"share_qk_gt_{CUT}_other"] = (either & ~sdh).sum((-2, -1)) / n_other
    return out


def bootstrap(per: dict[str, np.ndarray], kv: np.ndarray, idx: np.ndarray, kappa: float) -> dict[str, np.ndarray]:
    """Every statistic per replicate (``idx [reps, draws]`` prompt indices): the drawn prompts' states pooled with
    ``weights`` (a scan of those prompts, up to a common scale that ``r1`` ignores) -> ``[reps]`` per statistic."""
    n = len(per["slash"])
    reps: dict[str, list] = {}
    for s in range(0, len(idx), CHUNK):
        w = weights(idx[s:s + CHUNK], n)
        pooled = {k: np.tensordot(w, v, axes=(1, 0)) for k, v in per.items()}
        for k, v in statistics(pooled["slash"], pooled["gq"], pooled["gk"], kv, kappa).items():
            reps.setdefault(k, []).append(v)
    return {k: np.concatenate(v) for k, v in reps.items()}


def main(argv: list[str] | None = None) -> pd.DataFrame:
    ap = parser(__doc__, "tiny-llama, 3 random-token prompts x 64 tokens, kappa 0.045, 100 replicates")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=1024)
    ap.add_argument("--boot", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0, help="selects the pydoc windows (0: those of compare_zoo.py)")
    args = ap.parse_args(argv)
    models = ["tiny-llama"] if args.quick else [m for m in args.models if interp.models.is_installed(m)]
    n, t, reps = (3, 64, 100) if args.quick else (args.prompts, args.tokens, args.boot)
    kappa = 0.045 if args.quick else KAPPA  # as sdh_count_bootstrap.py's quick mode (random weights: scores near 0.045)
    cfg = interp.ScanConfig(counterfactual_sinks=False, kappa=kappa)
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in models:
        t0 = time.perf_counter()
        model = interp.load_model(name, device="cpu")
        prompts = interp.corpus.prompts(model, "random" if args.quick else "pydoc", n, t, args.seed)
        per = per_prompt(model, prompts, cfg)
        kv = kv_index(model.card).numpy()
        point = statistics(per["slash"].mean(0), per["gq"].sum(0), per["gk"].sum(0), kv, kappa)
        boot = bootstrap(per, kv, boot_index(n, reps), kappa)
        for k, v in point.items():
            lo, hi = interval(boot[k])
            rows.append({"model": name, "prompts": n, "tokens": t, "statistic": k, "value": float(v), "lo": lo, "hi": hi,
                         "boot": reps})
        print(f"{name}: {point['sdh_count']:.0f} SDHs; r1(Q) SDH - other {point['r1_q_diff']:+.3f} "
              f"[{interval(boot['r1_q_diff'])[0]:+.3f}, {interval(boot['r1_q_diff'])[1]:+.3f}], r1(K) {point['r1_k_diff']:+.3f}; "
              f"SDHs with r1 > {CUT} for Q or K: {point[f'share_qk_gt_{CUT}']:.2f}; {time.perf_counter() - t0:.0f} s", flush=True)
        del model
    return write_rows(pd.DataFrame(rows), args.out / "sdh_rank_one.csv", merge=not args.quick)


if __name__ == "__main__":
    main()
