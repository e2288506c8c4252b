"""Paper 001 Fig. 6 past the context with intervals over prompts (claims 001d, 001e): one forward per prompt.

001 Fig. 6 plots, against input length, the attention weight on the sink token with RoPE and in the pre-RoPE
counterfactual (left), and the largest q.k per query (right), for Llama3 past its 8k training length. ``interp sweep``
measures the same columns (``sink_weight``, ``sink_weight_norope``, ``max_qk_rot``, ``max_qk_pre``), but it scans
every length with every measure on: at 16384 tokens one SmolLM2 prompt took over 20 minutes of this CPU. These four
numbers need far less, because the model is causal: the first ``n`` positions of one long forward are exactly a
forward of the ``n``-token prefix. So each prompt is captured once at the longest length (``interp.capture``), and for
every length ``n`` the four means over the prefix's queries are estimated from a seeded stratified sample of
query positions in ``[0, n)`` (``query_rows``: the first ``--rows`` exactly, ``--rows`` stratified positions over
the rest, ``interp.attention.stratified_rows``; unbiased for the mean over all ``n`` queries, exact when
``n <= 2 * rows``), each row's attention computed exactly over its whole visible row
(``interp.attention.key_weight_rows``; ``interp.measures.geometry.max_qk``):

- ``sink_weight``: ``mean_{i<n} A[i, 0]`` with RoPE, as the scan's ``sink_weight`` on the ``n``-token prefix;
- ``sink_weight_norope``: the same with ``softmax(q_pre . k_pre)`` (same scale, mask, soft-cap), the scan's
  ``sink_weight_norope``;
- ``max_qk_rot`` / ``max_qk_pre``: ``mean_{i<n} max_{j<=i} q_i . k_j`` (raw dot products), the scan's columns.

Per prompt and length the median over heads is kept (as ``frayed_bootstrap.py``), and the per-prompt changes from
the shortest length and from the longest length inside the context get a 95% percentile bootstrap interval over
prompts (``frayed_bootstrap.changes``). The tiny-model test checks the estimates with all rows against
``interp.scan`` of each prefix.

Writes ``sink_beyond_prompts.csv`` (``model, prompt, length, context, measure, median``) and ``sink_beyond.csv``
(``model, measure, length_from, length_to, beyond_context, prompts, change, change_lo, change_hi, positive,
value_from, value_to, boot``).

    python -m analyses.p001_frayed.sink_beyond [--models smollm2-135m] [--lengths 1024,2048,4096,8192,16384]
        [--prompts 8] [--rows 256] [--corpus stdlib] [--boot 2000] [--device cpu] [--quick] [--out DIR]
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

import interp
from analyses._common import parser, write_rows
from analyses.p001_frayed._loop import model_runs
from analyses.p001_frayed.frayed_bootstrap import changes
from interp.attention import key_weight_rows, stratified_rows
from interp.measures.geometry import max_qk

MEASURES = ["sink_weight", "sink_weight_norope", "max_qk_rot", "max_qk_pre"]


def query_rows(n: int, rows: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Query positions and weights whose weighted sum is an unbiased estimate of the mean over ``[0, n)``: the first
    ``rows`` positions exactly (early queries see few keys, so they are cheap, and there the sink weight varies most:
    query 0 gives all its attention to token 0), then ``rows`` stratified positions over the rest
    (``interp.attention.stratified_rows``). All ``n`` positions when ``n <= 2 * rows``.

    Returns:
        ``(positions [m] int64 sorted, weights [m] float64 summing to 1)``.
    """
    if n <= 2 * rows:
        return torch.arange(n), torch.full((n,), 1.0 / n, dtype=torch.float64)
    rest, w = stratified_rows(n - rows, rows, seed)
    return (torch.cat([torch.arange(rows), rest + rows]),
            torch.cat([torch.full((rows,), 1.0 / n, dtype=torch.float64), w * (n - rows) / n]))


def prefix_means(model, cap, lengths: list[int], rows: int, seed: int = 0) -> dict[int, dict[str, np.ndarray]]:
    """Per length ``n``: ``{measure: [layer, head] float64}``, the means over the ``n``-token prefix's queries of each
    ``MEASURES`` column, from one capture of the longest prompt (module docstring).

    Args:
        model: the ``LoadedModel`` captured (its card gives each layer's scale, window and soft-cap).
        cap: ``interp.Capture`` of one prompt at least ``max(lengths)`` long.
        lengths: prefix lengths; rows: ``query_rows``' count (all rows when ``n <= 2 * rows``); seed: the rows' seed
            (the same rows for every layer and head).
    """
    card = model.card
    out = {n: {m: np.zeros((card.n_layers, card.n_heads)) for m in MEASURES} for n in lengths}
    for n in lengths:
        pos, w = query_rows(n, rows, seed + n)
        for layer in range(card.n_layers):
            scale, window = card.attn_scale[layer], card.sliding_window[layer]
            for name, q, k in (("", cap.q_rot[layer], cap.k_rot[layer]), ("_pre", cap.q_pre[layer], cap.k_pre[layer])):
                q, k = q[:n], k[:n]
                a0 = key_weight_rows(q, k, pos, scale, window, card.softcap, key=0).double().cpu()  # [head, row]
                mq = max_qk(q, k, window, queries=pos).double().cpu()
                out[n]["sink_weight" + ("_norope" if name else "")][layer] = (a0 * w).sum(-1).numpy()
                out[n]["max_qk" + (name or "_rot")][layer] = (mq * w).sum(-1).numpy()
    return out


def main(argv: list[str] | None = None) -> pd.DataFrame:
    ap = parser(__doc__, "tiny-llama, 3 random-token prompts at 32, 64 and 128 tokens, 200 resamples")
    ap.set_defaults(models=["smollm2-135m"])
    ap.add_argument("--lengths", default="1024,2048,4096,8192,16384")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--rows", type=int, default=256, help="query rows per length: this many first positions, this many stratified over the rest")
    ap.add_argument("--corpus", default="stdlib", help="stdlib (pydoc holds 113k tokens: 6 prompts of 16384)")
    ap.add_argument("--boot", type=int, default=2000)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args(argv)
    lengths = [32, 64, 128] if args.quick else sorted(int(x) for x in args.lengths.split(","))
    n, boot = (3, 200) if args.quick else (args.prompts, args.boot)
    per = []
    for run in model_runs(args, n, max(lengths), corpus=args.corpus, device=args.device):
        name, model, prompts = run.name, run.model, run.prompts
        context = model.card.context_length
        for i in range(n):
            cap = interp.capture(model, prompts[i], beyond_context=True)
            for length, cols in prefix_means(model, cap, lengths, args.rows).items():
                for measure, v in cols.items():
                    per.append({"model": name, "prompt": i, "length": length, "context": context, "measure": measure,
                                "median": float(np.median(v))})
            del cap
            print(f"{name}: prompt {i + 1} of {n} at {lengths} ({run.seconds():.0f} s)", flush=True)
        del model, prompts
    per_df = pd.DataFrame(per)
    summary = changes(per_df, boot)
    merge = not args.quick
    write_rows(per_df, args.out / "sink_beyond_prompts.csv", keys=("model",), merge=merge)
    out = write_rows(summary, args.out / "sink_beyond.csv", keys=("model",), merge=merge)
    print(summary[summary["beyond_context"]][["model", "measure", "length_from", "length_to", "change", "change_lo",
                                               "change_hi", "positive"]].to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    return out


if __name__ == "__main__":
    main()
