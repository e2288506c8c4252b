"""Silhouette and Davies-Bouldin of the query and key clouds against context length (paper 001 Fig. 11), SmolLM2-135M.

The length sweep of docs/results/paper-001.md (``interp sweep smollm2-135m --lengths 512,...,16384 --prompts 2
--beyond-context``) reports per head the silhouette score and Davies-Bouldin index of {q_i} vs {k_i}, before and
after RoPE (``interp.measures.geometry.cluster_scores`` on ``sample_positions(n, cluster_points, seed)``, seed =
prompt id * 1009 + layer, mean over prompts). Queries and keys at positions < n depend only on the first n tokens
(causal model), so the clouds of every prefix ``prompts[:, :n]`` are the first n rows of one forward of the whole
prompt: this script runs that forward once per prompt (``interp.models.taps.attention_taps``; post-RoPE ``call.query``
/ ``call.key`` and ``call.pre()``, what the scan's geometry measure reads) and calls the measure's own
``cluster_scores`` at every length with the measure's positions, instead of one geometry scan per length (the
sweep's 12 minutes). ``--check N`` also runs ``interp.scan(..., ScanConfig(geometry=True))`` on the ``N``-token
prefixes and reports the largest difference per head (the test runs it on a short length).

Writes ``figures/cluster_length.csv`` (``--cluster-points``, default 1000: 500 + 500 as in the docs' sweep, whose silhouette
medians in ``frayed_rope_summary.csv`` this reproduces to their rounding): ``model, length, prompts, measure`` (``silhouette_pre``, ``silhouette_rot``,
``davies_bouldin_pre``, ``davies_bouldin_rot``), ``median``, ``q25``, ``q75`` over heads, ``boot_lo`` / ``boot_hi``
(95% percentile interval of the median over a bootstrap of the prompts, ``key_norm_length.BOOT`` resamples; with two
prompts a crude interval: at most the span of the two prompts' own medians), ``prompt_tokens``.

    python -m analyses.p001_frayed.cluster_length [--models smollm2-135m] [--lengths 512,...,16384] [--prompts 2] [--check 512] [--quick]
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

import interp
from interp.measures.geometry import cluster_scores, sample_positions
from interp.models.taps import attention_taps

from analyses._common import parser
from analyses.p001_frayed._loop import model_runs
from analyses.p001_frayed.key_norm_length import BOOT

# the sweep of docs/results/paper-001.md ran with 500 + 500 points (the default before issue 23 made it 400 in all):
# with these the silhouette medians here equal its frayed_rope_summary.csv values to the tables' 4-decimal rounding
SWEEP_POINTS = 1000
MEASURES = ["silhouette_pre", "silhouette_rot", "davies_bouldin_pre", "davies_bouldin_rot"]


def prompt_clusters(model, tokens: torch.Tensor, lengths: list[int], prompt_id: int, n_points: int) -> np.ndarray:
    """``[length, 4, layer, head]`` cluster scores (``MEASURES`` order) of one prompt's prefixes, as a geometry scan of
    ``tokens[:n]`` with prompt id ``prompt_id`` and ``cluster_points = n_points`` computes them (float64)."""
    out = np.full((len(lengths), 4, model.card.n_layers, model.card.n_heads), np.nan)

    def keep(call):
        q_pre, k_pre = call.pre()
        for i, n in enumerate(lengths):
            pos = sample_positions(n, n_points, prompt_id * 1009 + call.layer)
            pre = cluster_scores(q_pre[:n], k_pre[:n], pos)
            rot = cluster_scores(call.query[:n], call.key[:n], pos)
            out[i, :, call.layer] = torch.stack([pre[0], rot[0], pre[1], rot[1]]).numpy()
        return None  # the layer's normal attention

    with torch.no_grad(), attention_taps(model, keep):
        model.hf.base_model(tokens[None, : max(lengths)].to(model.device), use_cache=False)
    return out


def table(model_name: str, per: np.ndarray, lengths: list[int], seed: int = 0) -> pd.DataFrame:
    """Median and quartiles over heads of the prompts' mean, with a bootstrap over prompts; ``per`` ``[prompt, length, 4, L, H]``."""
    idx = np.random.default_rng(seed).integers(0, len(per), size=(BOOT, len(per)))
    rows = []
    for i, n in enumerate(lengths):
        for j, name in enumerate(MEASURES):
            x = per[:, i, j].reshape(len(per), -1)  # [prompt, head]
            v = x.mean(0)
            lo, hi = np.percentile(np.median(x[idx].mean(1), axis=1), [2.5, 97.5])
            rows.append({"model": model_name, "length": n, "prompts": len(per), "measure": name, "median": np.median(v),
                         "q25": np.quantile(v, 0.25), "q75": np.quantile(v, 0.75), "boot_lo": lo, "boot_hi": hi})
    return pd.DataFrame(rows)


def check(model, prompts, n: int, per: np.ndarray, lengths: list[int], n_points: int) -> float:
    """Largest |difference| over heads and ``MEASURES`` between this script's values and a geometry scan at length ``n``."""
    res = interp.scan(model, [p[:n] for p in prompts], interp.ScanConfig(geometry=True, cluster_points=n_points), beyond_context=True)
    h = res.heads.sort_values(["layer", "head"])
    mine = per[:, lengths.index(n)].mean(0)  # [4, L, H]
    return float(max(np.abs(h[m].to_numpy() - mine[j].ravel()).max() for j, m in enumerate(MEASURES)))


def main(argv: list[str] | None = None) -> pd.DataFrame:
    ap = parser(__doc__, "tiny-llama at 64, 128 tokens, random prompts, with --check 64")
    ap.set_defaults(models=["smollm2-135m"])
    ap.add_argument("--lengths", default="512,1024,2048,4096,8192,16384")
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--check", type=int, default=0, help="also compare with a geometry scan at this length (one of --lengths)")
    ap.add_argument("--cluster-points", type=int, default=SWEEP_POINTS,
                    help="points per head and prompt (default: those of the sweep in docs/results/paper-001.md)")
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.quick:
        args.lengths, args.check = "64,128", 64
    lengths = [int(x) for x in args.lengths.split(",")]
    if args.check and args.check not in lengths:
        ap.error(f"--check {args.check} must be one of --lengths ({args.lengths})")
    args.out.mkdir(parents=True, exist_ok=True)
    frames = []
    for run in model_runs(args, args.prompts, max(lengths)):
        per = np.stack([prompt_clusters(run.model, t, lengths, i, args.cluster_points) for i, t in enumerate(run.prompts)])
        frames.append(table(run.name, per, lengths).assign(prompt_tokens=max(lengths)))
        msg = f"{run.name}: {len(run.prompts)} prompts x {max(lengths)} tokens in {run.seconds():.0f} s"
        if args.check:
            diff = check(run.model, run.prompts, args.check, per, lengths, args.cluster_points)
            msg += f"; largest difference from a geometry scan at {args.check} tokens: {diff:.2e}"
        print(msg, flush=True)
    df = pd.concat(frames, ignore_index=True)
    df.round(4).to_csv(args.out / "cluster_length.csv", index=False)
    print(df.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    return df


if __name__ == "__main__":
    main()
