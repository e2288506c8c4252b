"""``interp kvsplit``: a DuoAttention retrieval / streaming split of the kv heads, training-free, for serving.
Options and outputs: ``interp kvsplit --help``; the orders: ``interp.experiments.kv_budget``."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from interp.cli.common import (
    DEVICE, DTYPE, MODEL, PROMPTS, SEED, app, check_before_load, check_paths, console, fail, tokens_option,
)
from interp.errors import ConfigError, InterpError


@app.command()
def kvsplit(
    model: str = MODEL,
    order: str = typer.Option("geometric", help="geometric (predicted distant mass) | effects (single-head streaming cost; "
                              "needs --effects) | distant_mass (measured) | kvpress (kvpress's on-the-fly score)"),
    streaming_share: float = typer.Option(0.5, help="share of kv heads to stream, in [0, 1] (DuoAttention: 0.75 MHA, 0.5 GQA)"),
    sink: int = typer.Option(128, help="sink tokens a streaming head keeps (config.json sink_size; DuoAttention: 128)"),
    window: int = typer.Option(256, help="recent tokens a streaming head keeps (config.json recent_size; DuoAttention: 256)"),
    effects: Optional[Path] = typer.Option(None, help="effects.csv of `interp effects MODEL --interventions streaming` "
                                           "(order effects)"),
    serve_tokens: Optional[int] = typer.Option(None, min=2, help="order geometric: predict each head's distant mass outside "
                                               "--sink and --window at this context length (tokens) instead of at the "
                                               "scanned length with the shape measure's scaled budgets"),
    prompts: int = PROMPTS,
    tokens: int = tokens_option(1024, "tokens per pydoc prompt of the scan that scores the heads"),
    seed: int = SEED,
    out: Path = typer.Option(Path("out/kvsplit"), help="output folder (full_attention_heads.tsv, config.json, patterns.json, "
                             "kvsplit.csv)"),
    device: str = DEVICE,
    dtype: str = DTYPE,
) -> None:
    """Split the kv heads into full-cache (retrieval) and streaming heads without training, as DuoAttention's files.

    One scan of pydoc prompts with the shape and kv_budget measures scores every kv head (high = keep the full
    cache); the lowest-ranked --streaming-share of kv heads stream (keep --sink first and --window last tokens).
    Writes full_attention_heads.tsv (rows = layers, tab-separated kv heads, a score in [0, 1]: the ranks with the
    streamed heads below 0.5 and the kept ones at or above it, so DuoAttention's loader and kvpress's
    DuoAttentionPress read the split), config.json (sink_size, recent_size, order, share), patterns.json (per query
    head the MInference pattern, stream_llm or vertical_and_slash, that covers more of its attention) and kvsplit.csv
    (layer, kv_head, score, raw score, streamed).
    """
    from interp.experiments.kv_budget import ORDERS

    try:
        if order not in ORDERS:
            raise ConfigError(f"unknown --order {order!r}; use one of {', '.join(ORDERS)}")
        if not 0.0 <= streaming_share <= 1.0:
            raise ConfigError(f"--streaming-share must lie in [0, 1] (a share of the kv heads), got {streaming_share}")
        if sink < 0 or window < 1:
            raise ConfigError(f"--sink must be >= 0 and --window >= 1 token, got {sink} and {window}")
        if order == "effects" and effects is None:
            raise ConfigError("--order effects needs --effects effects.csv (from `interp effects MODEL --interventions streaming`)")
    except InterpError as err:
        fail(err)
    check_paths(out, writes="full_attention_heads.tsv, config.json, patterns.json, kvsplit.csv",
                files={"--effects": effects}, model=model)
    check_before_load(model, device=device, dtype=dtype, corpus="pydoc", tokens=tokens)

    import pandas as pd

    import interp
    from interp.engine import ScanConfig
    from interp.experiments.kv_budget import kv_scores, minference_patterns, split_scores, streamed, write_split

    try:
        eff = None
        if effects is not None:
            eff = pd.read_csv(effects)
            if not {"layer", "head", "intervention", "dnll"} <= set(eff.columns):
                raise ConfigError(f"--effects {effects} has no layer, head, intervention, dnll columns; give the effects.csv "
                                  f"that `interp effects` writes")
        with console.status(f"loading {model}"):
            m = interp.load_model(model, device=device, dtype=dtype)
        p = interp.corpus.prompts(m, "pydoc", prompts, tokens, seed=seed)
        res = interp.scan(m, p, ScanConfig(shape=True, kv_budget=True), progress=True)
        heads = res.heads
        if order == "geometric" and serve_tokens:
            from interp.measures.kv_budget import predicted

            geo = predicted(res, serve_tokens, sink, window)["geo_distant_mass"].numpy()
            heads = heads.assign(geo_distant_mass=geo[heads["layer"].to_numpy(int), heads["head"].to_numpy(int)])
        raw = kv_scores(heads, m.card, order, eff)
        score = split_scores(raw, streaming_share)
        kv = set(streamed(raw, streaming_share))
        meta = {"order": order, "streaming_share": streaming_share, "model": m.card.name, "prompts": prompts, "tokens": tokens,
                "serve_tokens": serve_tokens}
        paths = write_split(out, score, sink, window, minference_patterns(res.heads, tokens), meta)
    except (InterpError, ValueError) as err:
        fail(err)
    K = m.card.n_kv_heads
    table = pd.DataFrame([{"layer": l, "kv_head": k, "score": float(score[l, k]), "raw_score": float(raw[l, k]),
                           "streamed": (l, k) in kv} for l in range(m.card.n_layers) for k in range(K)])
    table.to_csv(out / "kvsplit.csv", index=False)
    console.print(f"{len(kv)} of {table.shape[0]} kv heads stream (order {order}); wrote "
                  f"{', '.join(str(x) for x in paths)}, {out / 'kvsplit.csv'}", soft_wrap=True)
