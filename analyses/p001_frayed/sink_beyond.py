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
- ``max_qk_rot`` / ``max_qk_pre``: ``mean_{i<n} max_{j<=i} q_i . k_j`` (raw dot products), the scan's columns;
- ``sink_weight_last``, ``sink_weight_norope_last``, ``max_qk_rot_last``, ``max_qk_pre_last``: the same four over
  the prefix's last ``--rows`` queries ``[n - rows, n)`` only (every one, exactly). The prefix means above average
  every query from position 0, so past the context they still hold the in-context queries (a quarter of them at
  4x); these read the curve at position ``n``, the queries that see the whole prefix, which is how a causal model
  "decays to zero over time" (001 Sec. 3.2.1; 001 does not say which queries Fig. 6 averages);
- ``srank_k_pre``, ``srank_k_rot``, ``srank_q_pre``, ``srank_q_rot``, ``fsv_ratio_k`` (001 Fig. 4): stable ranks and
  the key FSV ratio of the prefix's queries and keys, from its Gram matrices ``sum_{i<n} x_i x_i^T`` (every row, exact:
  accumulated chunk by chunk between the lengths, float32 products summed in float64, as ``interp scan``'s
  ``spectrum`` measure; ``interp.measures.spectrum.spectrum_metrics``); kv-head values shown on each query head of the
  group, as the scan's head table.

Per prompt and length the median over heads is kept (as ``frayed_bootstrap.py``), and the per-prompt changes from
the shortest length and from the longest length inside the context get a 95% percentile bootstrap interval over
prompts (``frayed_bootstrap.changes``). The tiny-model test checks the estimates with all rows against
``interp.scan`` of each prefix.

Writes ``sink_beyond_prompts.csv`` (``model, prompt, length, context, measure, median``), ``sink_beyond.csv``
(``model, measure, length_from, length_to, beyond_context, prompts, change, change_lo, change_hi, positive,
value_from, value_to, boot``), per head ``sink_beyond_heads.csv`` (``model, layer, head, length, context, measure,
mean, lo, hi, prompts``: the mean over prompts with its 95% bootstrap interval over prompts; six significant digits)
and the figure ``sink_beyond.png`` (+ ``.html``; ``figure``): Fig. 6's two panels per model with bootstrap bands, the
last-queries curves dashed (``--from-table figures/sink_beyond_prompts.csv`` redraws it without a model run).

``--stem`` renames the outputs: the committed fine grid between one and two contexts, ``sink_beyond_fine*``, is
``--stem sink_beyond_fine --lengths 8192,9216,10240,11264,12288,13312,14336,15360,16384`` (where the last queries'
sink weight dies).

``--lengths`` takes token counts or multiples of each model's context (``0.125x,1x,2x,4x``), so one run sweeps models
of different contexts to the same multiples (the ``sink`` step of ``analyses/benchmarks/device_check.sh``).

    python -m analyses.p001_frayed.sink_beyond [--models smollm2-135m] [--lengths 1024,2048,4096,8192,16384]
        [--prompts 8] [--rows 256] [--corpus stdlib] [--boot 2000] [--device cpu] [--stem sink_beyond] [--quick] [--out DIR]
    python -m analyses.p001_frayed.sink_beyond --from-table figures/sink_beyond_prompts.csv   # only the figure
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots

import interp
from analyses._common import parser, save_figure, write_rows
from analyses.p001_frayed._loop import model_runs
from analyses.p001_frayed.frayed_bootstrap import changes
from interp.experiments.stats import bootstrap_interval
from interp.attention import key_weight_rows, stratified_rows
from interp.measures.base import kv_index
from interp.measures.geometry import max_qk
from interp.measures.spectrum import gram, spectrum_metrics

MEASURES = ["sink_weight", "sink_weight_norope", "max_qk_rot", "max_qk_pre"]
LAST = [m + "_last" for m in MEASURES]  # the same means over the prefix's last ``rows`` queries only
SPECTRUM = ["srank_k_pre", "srank_k_rot", "srank_q_pre", "srank_q_rot", "fsv_ratio_k"]


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
    ``MEASURES`` column, the same over its last ``rows`` queries (``LAST``) and the ``SPECTRUM`` columns of the prefix,
    from one capture of the longest prompt (module docstring).

    Args:
        model: the ``LoadedModel`` captured (its card gives each layer's scale, window and soft-cap).
        cap: ``interp.Capture`` of one prompt at least ``max(lengths)`` long.
        lengths: prefix lengths; rows: ``query_rows``' count (all rows when ``n <= 2 * rows``) and the ``LAST`` means'
            count of last queries; seed: the rows' seed (the same rows for every layer and head).
    """
    card = model.card
    lengths = sorted(lengths)
    out = {n: {m: np.zeros((card.n_layers, card.n_heads)) for m in MEASURES + LAST + SPECTRUM} for n in lengths}
    for n in lengths:
        last = torch.arange(max(0, n - rows), n)
        samples = (("", *query_rows(n, rows, seed + n)), ("_last", last, torch.full((len(last),), 1.0 / len(last), dtype=torch.float64)))
        for layer in range(card.n_layers):
            scale, window = card.attn_scale[layer], card.sliding_window[layer]
            for name, q, k in (("", cap.q_rot[layer], cap.k_rot[layer]), ("_pre", cap.q_pre[layer], cap.k_pre[layer])):
                q, k = q[:n], k[:n]
                for suffix, pos, w in samples:
                    a0 = key_weight_rows(q, k, pos, scale, window, card.softcap, key=0).double().cpu()  # [head, row]
                    mq = max_qk(q, k, window, queries=pos).double().cpu()
                    out[n]["sink_weight" + ("_norope" if name else "") + suffix][layer] = (a0 * w).sum(-1).numpy()
                    out[n]["max_qk" + (name or "_rot") + suffix][layer] = (mq * w).sum(-1).numpy()
    kv = kv_index(card)
    for layer in range(card.n_layers):
        grams = {}
        for start, n in zip([0] + lengths[:-1], lengths):  # each prefix's Gram = the previous one's + its new rows'
            for x in ("q", "k"):
                for kind in ("pre", "rot"):
                    rows_x = getattr(cap, f"{x}_{kind}")[layer][start:n]
                    grams[x, kind] = grams.get((x, kind), 0) + gram(rows_x).cpu()
                pre, rot = spectrum_metrics(grams[x, "pre"]), spectrum_metrics(grams[x, "rot"])
                e = (lambda t: t[kv]) if x == "k" else (lambda t: t)  # kv-head values on each query head of the group
                out[n][f"srank_{x}_pre"][layer] = e(pre["srank"]).numpy()
                out[n][f"srank_{x}_rot"][layer] = e(rot["srank"]).numpy()
                if x == "k":
                    out[n]["fsv_ratio_k"][layer] = e(rot["spec_norm"] / pre["spec_norm"]).numpy()
    return out


def parse_lengths(spec: str, context: int) -> list[int]:
    """Prefix lengths from ``--lengths``: token counts (``1024``) or multiples of the model's context (``4x``: four
    times ``context``; ``0.125x``), sorted and without repeats.

    Raises:
        ValueError: an entry that is neither, or a length below 2 tokens.
    """
    out = set()
    for part in filter(None, (p.strip() for p in spec.split(","))):
        try:
            n = round(float(part[:-1]) * context) if part.endswith("x") else int(part)
        except ValueError:
            raise ValueError(f"--lengths: {part!r} is neither a token count (1024) nor a multiple of the context (4x)") from None
        if n < 2:
            raise ValueError(f"--lengths: {part!r} gives {n} tokens; a prefix needs at least 2")
        out.add(n)
    return sorted(out)


def head_rows(name: str, context: int, lengths: list[int], per_prompt: list[dict], boot: int) -> pd.DataFrame:
    """``sink_beyond_heads.csv`` rows: per layer, head, length and measurement the mean over prompts and its 95%
    percentile bootstrap interval over prompts (``interp.experiments.stats.bootstrap_interval``, seed 0).

    Args:
        per_prompt: one ``prefix_means`` result per prompt (``{length: {measure: [layer, head]}}``).
    """
    frames = []
    for n in lengths:
        for m in per_prompt[0][n]:
            v = np.stack([p[n][m] for p in per_prompt], -1)  # [layer, head, prompt]
            L, H, P = v.shape
            lo, hi = bootstrap_interval(v.reshape(L * H, P), boot)
            frames.append(pd.DataFrame({"model": name, "layer": np.repeat(np.arange(L), H), "head": np.tile(np.arange(H), L),
                                        "length": n, "context": context, "measure": m, "mean": v.reshape(L * H, P).mean(1),
                                        "lo": lo, "hi": hi, "prompts": P}))
    return pd.concat(frames, ignore_index=True)


PANELS = (("sink weight on token 0", ("sink_weight", "sink_weight_norope")),
          ("largest q.k per query", ("max_qk_rot", "max_qk_pre")))


def figure(per: pd.DataFrame, boot: int) -> go.Figure:
    """001 Fig. 6 with intervals: per model (rows) the sink weight (left) and the largest q.k per query (right)
    against the prefix length, with RoPE (blue) and pre-RoPE (orange), over all the prefix's queries (solid) and its
    last ``--rows`` queries (dashed); mean over prompts of the per-prompt median over heads, with its 95% bootstrap
    band over prompts; dotted line: the model's context.

    Args:
        per: ``sink_beyond_prompts.csv`` rows (``model, prompt, length, context, measure, median``).
    """
    models = list(dict.fromkeys(per["model"]))
    fig = make_subplots(rows=len(models), cols=2, subplot_titles=[f"{m}: {t}" for m in models for t, _ in PANELS])
    for r, model in enumerate(models, 1):
        g = per[per["model"] == model]
        for c, (_, measures) in enumerate(PANELS, 1):
            for measure, color, kind in zip(measures, ("#1f77b4", "#ff7f0e"), ("with RoPE", "pre-RoPE")):
                for suffix, dash, queries in (("", "solid", "all queries"), ("_last", "dash", "last queries")):
                    wide = g[g["measure"] == measure + suffix].pivot(index="length", columns="prompt", values="median")
                    if wide.empty:
                        continue  # a table from before the *_last columns
                    lo, hi = bootstrap_interval(wide.to_numpy(), boot)
                    x = wide.index.to_numpy()
                    fig.add_trace(go.Scatter(x=np.r_[x, x[::-1]], y=np.r_[hi, lo[::-1]], mode="lines", fill="toself", line=dict(width=0),
                                             fillcolor=color, opacity=0.15, showlegend=False, hoverinfo="skip"), r, c)
                    label = f"{kind}, {queries}"
                    fig.add_trace(go.Scatter(x=x, y=wide.mean(axis=1), name=label, legendgroup=label, showlegend=r == 1 and c == 1,
                                             mode="lines+markers", line=dict(color=color, dash=dash)), r, c)
            fig.add_vline(x=int(g["context"].iloc[0]), line_dash="dot", line_color="#888", row=r, col=c)
            fig.update_xaxes(type="log", title_text="prefix length (tokens)", row=r, col=c)
    fig.update_layout(title="001 Fig. 6 past the context: median over heads, mean over prompts, 95% bootstrap band "
                      "(dotted: the context)", height=420 * len(models), width=1200)
    return fig


def main(argv: list[str] | None = None) -> pd.DataFrame:
    ap = parser(__doc__, "tiny-llama, 3 random-token prompts at 32, 64 and 128 tokens, 200 resamples")
    ap.set_defaults(models=["smollm2-135m"])
    ap.add_argument("--lengths", default="1024,2048,4096,8192,16384",
                    help="prefix lengths: token counts, or multiples of each model's context (0.125x,1x,4x)")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--rows", type=int, default=256, help="query rows per length: this many first positions, this many stratified over the rest; the *_last means' last queries")
    ap.add_argument("--corpus", default="stdlib", help="stdlib (pydoc holds 113k tokens: 6 prompts of 16384)")
    ap.add_argument("--boot", type=int, default=2000)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--from-table", type=Path, default=None, help="only redraw the figure from a saved sink_beyond_prompts.csv")
    ap.add_argument("--stem", default="sink_beyond", help="the tables' and figure's file name stem, starting with sink_beyond (sink_beyond_fine: the fine grid)")
    args = ap.parse_args(argv)
    if not args.stem.startswith("sink_beyond"):
        ap.error(f"--stem {args.stem!r} must start with sink_beyond (sink_beyond_fine), so the analyses index finds its files")
    suffix = args.stem[len("sink_beyond"):]  # save_figure's stem as f"sink_beyond{suffix}": the index reads the literal part
    if args.from_table is not None:
        per_df = pd.read_csv(args.from_table)
        save_figure(figure(per_df, args.boot), args.out, f"sink_beyond{suffix}")
        return per_df
    spec = "32,64,128" if args.quick else args.lengths
    try:
        parse_lengths(spec, 1)
    except ValueError as e:
        ap.error(str(e))
    n, boot = (3, 200) if args.quick else (args.prompts, args.boot)
    per, heads = [], []
    lengths_of = lambda card: parse_lengths(spec, card.context_length)  # noqa: E731
    for run in model_runs(args, n, lambda card: max(lengths_of(card)), corpus=args.corpus, device=args.device):
        name, model, prompts = run.name, run.model, run.prompts
        context, lengths = model.card.context_length, lengths_of(model.card)
        got = []
        for i in range(n):
            cap = interp.capture(model, prompts[i], beyond_context=True)
            got.append(prefix_means(model, cap, lengths, args.rows))
            for length, cols in got[-1].items():
                for measure, v in cols.items():
                    per.append({"model": name, "prompt": i, "length": length, "context": context, "measure": measure,
                                "median": float(np.median(v))})
            del cap
            print(f"{name}: prompt {i + 1} of {n} at {lengths} ({run.seconds():.0f} s)", flush=True)
        heads.append(head_rows(name, context, lengths, got, boot))
        del model, prompts
    per_df = pd.DataFrame(per)
    summary = changes(per_df, boot)
    merge = not args.quick
    all_prompts = write_rows(per_df, args.out / f"{args.stem}_prompts.csv", keys=("model",), merge=merge)
    write_rows(pd.concat(heads, ignore_index=True), args.out / f"{args.stem}_heads.csv", keys=("model",), merge=merge,
               float_format="%.6g")
    out = write_rows(summary, args.out / f"{args.stem}.csv", keys=("model",), merge=merge)
    save_figure(figure(all_prompts, boot), args.out, f"sink_beyond{suffix}")  # every model in the table, this run's and kept ones
    print(summary[summary["beyond_context"]][["model", "measure", "length_from", "length_to", "change", "change_lo",
                                               "change_hi", "positive"]].to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    return out


if __name__ == "__main__":
    main()
