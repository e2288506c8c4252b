"""Key norm of token 0 and of the other tokens against context length (paper 001 Fig. 5 left), SmolLM2-135M.

The length sweep (``interp sweep MODEL --lengths ... --beyond-context``, docs/results/paper-001.md) reports
``key_norm_first`` / ``key_norm_rest`` per head (``interp.measures.geometry``: mean over prompts of
``||k_j||``, the pre-RoPE key of the head's kv head, at position 0 and averaged over positions ``1..n-1``).
A key depends only on the tokens up to its position (causal model), so the keys of every prefix ``prompts[:, :n]``
are the first ``n`` keys of one forward of the whole prompt: this script runs that one forward per prompt
(``interp.models.taps.attention_taps``, the same pre-RoPE keys the scan reads, ``AttentionCall.pre``) and takes
the geometry measure's means for every length, instead of one geometry scan per length (the sweep's 12 minutes).
``--check N`` also runs ``interp.scan(..., ScanConfig(geometry=True))`` on the ``N``-token prefixes and reports
the largest difference per head (the tests run it on a short length).

Writes ``figures/key_norm_length.csv``: ``model, length, prompts, measure`` (``key_norm_first`` / ``key_norm_rest``),
``median``, ``q25``, ``q75`` over the query heads (a kv head's value counts once per query head, as in the sweep's
head table), plus ``boot_lo`` / ``boot_hi``: 95% percentile interval of the median over a bootstrap of the prompts
(with two prompts a crude interval: it spans the two prompts' own medians at most), and ``prompt_tokens`` (the
length of the drawn prompts whose prefixes are used).

    python -m analyses.p001_frayed.key_norm_length [--models smollm2-135m] [--lengths 512,...,16384] [--prompts 2] [--check 512] [--quick]
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

import interp
from interp.measures.base import kv_index
from interp.models.taps import attention_taps

from analyses._common import parser
from analyses.p001_frayed._loop import model_runs

BOOT = 10000


def key_norms(model, tokens: torch.Tensor) -> np.ndarray:
    """``[layer, kv_head, pos]`` norms of the pre-RoPE keys of one prompt (float64)."""
    out = [None] * model.card.n_layers

    def keep(call):
        _, k_pre = call.pre()
        out[call.layer] = k_pre.double().norm(dim=-1).T.cpu().numpy()  # [kv_head, pos]
        return None  # the layer's normal attention

    with torch.no_grad(), attention_taps(model, keep):
        model.hf.base_model(tokens[None].to(model.device), use_cache=False)
    return np.stack(out)


def per_head(norms: np.ndarray, kv: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``key_norm_first`` and ``key_norm_rest`` ``[layer, head]`` of prompts' norms ``[prompt, layer, kv, pos]`` at length n."""
    cur = norms[..., :n].mean(0)[:, kv]  # per-position mean over prompts, then to query heads: [L, H, n]
    return cur[..., 0], cur[..., 1:].mean(-1)


def table(model_name: str, norms: np.ndarray, kv: np.ndarray, lengths: list[int], seed: int = 0) -> pd.DataFrame:
    idx = np.random.default_rng(seed).integers(0, len(norms), size=(BOOT, len(norms)))
    rows = []
    for n in lengths:
        first, rest = per_head(norms, kv, n)
        # bootstrap: per-head values of a resample are the means over the drawn prompts of the per-prompt values
        f1 = norms[:, :, :, 0][:, :, kv]  # [prompt, L, H]
        r1 = norms[:, :, :, 1:n].mean(-1)[:, :, kv]
        for name, val, per in (("key_norm_first", first, f1), ("key_norm_rest", rest, r1)):
            reps = np.median(per[idx].mean(1).reshape(BOOT, -1), axis=1)
            lo, hi = np.percentile(reps, [2.5, 97.5])
            v = val.ravel()
            rows.append({"model": model_name, "length": n, "prompts": len(norms), "measure": name, "median": np.median(v),
                         "q25": np.quantile(v, 0.25), "q75": np.quantile(v, 0.75), "boot_lo": lo, "boot_hi": hi})
    return pd.DataFrame(rows)


def check(model, prompts, n: int, norms: np.ndarray, kv: np.ndarray) -> float:
    """Largest |difference| over heads between this script's values and a geometry scan at length ``n``."""
    res = interp.scan(model, [p[:n] for p in prompts], interp.ScanConfig(geometry=True, cluster_points=100), beyond_context=True)
    h = res.heads.sort_values(["layer", "head"])
    first, rest = per_head(norms, kv, n)
    return float(max(np.abs(h["key_norm_first"].to_numpy() - first.ravel()).max(),
                     np.abs(h["key_norm_rest"].to_numpy() - rest.ravel()).max()))


def main(argv: list[str] | None = None) -> pd.DataFrame:
    ap = parser(__doc__, "tiny-llama at 64, 128 tokens, random prompts, with --check 64")
    ap.set_defaults(models=["smollm2-135m"])
    ap.add_argument("--lengths", default="512,1024,2048,4096,8192,16384")
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--check", type=int, default=0, help="also compare with a geometry scan at this length")
    ap.add_argument("--prompt-tokens", type=int, default=0,
                    help="draw prompts of this many tokens and use their prefixes (default: the longest length); the sweep of "
                         "docs/results/paper-001.md drew 16384-token prompts")
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.quick:
        args.lengths, args.check = "64,128", 64
    lengths = [int(x) for x in args.lengths.split(",")]
    args.out.mkdir(parents=True, exist_ok=True)
    frames = []
    n_draw = max(args.prompt_tokens, max(lengths))
    for run in model_runs(args, args.prompts, n_draw):
        norms = np.stack([key_norms(run.model, t[: max(lengths)]) for t in run.prompts])
        kv = kv_index(run.model.card).numpy()
        df = table(run.name, norms, np.asarray(kv), lengths).assign(prompt_tokens=n_draw)
        frames.append(df)
        msg = f"{run.name}: {len(run.prompts)} prompts x {max(lengths)} tokens in {run.seconds():.0f} s"
        if args.check:
            diff = check(run.model, run.prompts, args.check, norms, np.asarray(kv))
            msg += f"; largest difference from a geometry scan at {args.check} tokens: {diff:.2e}"
        print(msg, flush=True)
    df = pd.concat(frames, ignore_index=True)
    df.round(4).to_csv(args.out / "key_norm_length.csv", index=False)
    print(df.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    return df


if __name__ == "__main__":
    main()
