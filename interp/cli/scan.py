"""``interp scan``: scan a model on a corpus; heads.csv, long_slash.csv, report.html and raw state (``--shard``: one
shard's state). Options and outputs: ``interp scan --help``."""

from __future__ import annotations

import time
from pathlib import Path
from typing import List, Optional

import typer
from rich.markup import escape

from interp.cli.common import (
    ADDRESS, BLOCK_SIZE, CORPUS, DEVICE, DEVICE_MAP, DTYPE, ENGINE, EXECUTOR, MEASURE, MODEL, PROMPTS, REPEATS, SEED,
    TOKENS, WORKERS, app, check_before_load, check_measures, check_paths, console, fail, long_summary, parse_shard,
    plural, top_option, top_sdh,
)
from interp.cli.longrun import FORCE, RESUME, Interrupted, model_identity, open_run, scan_units, stop
from interp.errors import InterpError


@app.command()
def scan(
    model: str = MODEL,
    corpus: str = CORPUS,
    prompts: int = PROMPTS,
    tokens: int = TOKENS,
    seed: int = SEED,
    repeats: int = REPEATS,
    measure: List[str] = MEASURE,
    out: Path = typer.Option(Path("out/scan"), help="output folder (created; heads.csv, long_slash.csv, report.html, state/ go in it)"),
    ood: bool = typer.Option(False, "--ood", help="also scan random-token prompts and report OOD ratios"),
    shard: Optional[str] = typer.Option(None, help="I/N: scan only prompts i with i % N == I and write raw state"),
    block_size: int = BLOCK_SIZE,
    long_min_frac: float = typer.Option(2 / 3, show_default="2/3", help="a long lag is an SDH only if it holds in at least this fraction of prompts"),
    inp: bool = typer.Option(False, "--inp", help="also the per-plane InP spectrum of every head (paper 004 eq. 8-9; ~+50% time)"),
    counterfactual: bool = typer.Option(True, "--counterfactual/--no-counterfactual",
                                        help="compute the pre-RoPE sink weight (one more QK^T per layer)"),
    full_profile: bool = typer.Option(False, "--full-profile", help="score every lag (the whole lag profile); by default only lags "
                                      "0..63 and the long range 500..5000, the others NaN (on a GPU the scan then skips their tiles)"),
    counterfactual_queries: int = typer.Option(256, "--counterfactual-queries", min=0,
                                               help="query rows per prompt for the pre-RoPE sink weight (a seeded stratified sample); "
                                                    "0 = every query, exact"),
    device: str = DEVICE,
    dtype: str = DTYPE,
    engine: str = ENGINE,
    device_map: Optional[str] = DEVICE_MAP,
    executor: str = EXECUTOR,
    workers: int = WORKERS,
    address: Optional[str] = ADDRESS,
    top: int = top_option("SDH", 15),
    resume: bool = RESUME,
    force: bool = FORCE,
) -> None:
    """Scan a model on a corpus; write heads.csv, long_slash.csv, report.html and raw state into OUT.

    Each finished prompt's state goes into OUT/units as the scan runs (with --executor ray too: the driver writes each
    prompt's state as its worker returns it); --resume continues an interrupted run on either executor, Ctrl-C /
    SIGTERM write partial tables from the finished prompts and exit 130 / 143.
    """
    check_measures(measure)
    t_start = time.perf_counter()
    i, n = parse_shard(shard)
    check_paths(out, writes="heads.csv, report.html, state/" if n == 1 else "state/", model=model)
    check_before_load(model, device=device, dtype=dtype, device_map=device_map, engine=engine, executor=executor,
                      corpus=corpus, prompts=prompts, tokens=tokens, repeats=repeats)
    settings = {"model": model, "corpus": corpus, "prompts": prompts, "tokens": tokens, "seed": seed, "repeats": repeats,
                "measure": sorted(measure), "ood": ood, "shard": f"{i}/{n}", "block_size": block_size,
                "long_min_frac": long_min_frac, "inp": inp, "counterfactual": counterfactual, "full_profile": full_profile,
                "counterfactual_queries": counterfactual_queries, "device": device, "dtype": dtype, "engine": engine}
    refuse = "--shard and --executor ray both split the prompts; use one of them" if executor != "local" and n > 1 else None
    run = open_run(out, "scan", settings, resume, force, refuse)
    stopped: Interrupted | None = None

    from interp import corpus as corpus_mod
    from interp.engine.executor import ModelSpec, workers_for
    from interp.models import load_model
    from interp.report.bundle import write_outputs
    from interp.engine import ScanConfig
    from interp.engine.config import switch_on

    try:
        cfg = switch_on(ScanConfig(block_size=block_size, counterfactual_sinks=counterfactual, counterfactual_queries=counterfactual_queries,
                                   full_profile=full_profile, long_min_frac=long_min_frac, inp=inp),
                             measure)  # checks ranges and names
        with console.status(f"loading {model}"):
            m = load_model(model, device=device, dtype=dtype, device_map=device_map)
        p = corpus_mod.prompts(m, corpus, prompts, tokens, seed, repeats=repeats)[i::n]
        ids = range(i, prompts, n)  # global prompt indices, so merged shards name the prompt of a content repeat
        meta = {"corpus": corpus, "seed": seed, "shard": f"{i}/{n}"}
        run.begin(model_identity(m.card), len(p) * (2 if ood else 1))
        ood_result = None
        with workers_for(ModelSpec(model, str(m.device), dtype, engine), executor, workers, address) as actors:
            result, stopped = scan_units(run, m, p, ids, cfg, meta, engine, "prompt", actors=actors)
            if ood and stopped is None:
                r = corpus_mod.prompts(m, "random", prompts, tokens, seed)[i::n]
                ood_result, stopped = scan_units(run, m, r, ids, cfg, {**meta, "corpus": "random"}, engine, "ood", actors=actors)
    except InterpError as err:
        fail(err)
    done = 0 if result is None else result.meta["prompts"]
    if stopped is not None:
        partial = f"{done} of {len(p)} prompts" + (f"; random-token prompts {ood_result.meta['prompts'] if ood_result else 0} of {len(p)}"
                                                  if ood else "")
        for r_ in (result, ood_result):
            if r_ is not None:
                r_.meta["partial"] = partial
        if result is None:
            stop(stopped, 0, len(p), "prompts", out)
        ood_result = ood_result if ood_result is not None and ood_result.meta["prompts"] == len(p) else None
    if n > 1:
        result.save(out / "state")
        if ood_result is not None:
            ood_result.save(out / "ood")
        console.print(f"shard {i}/{n}: {plural(len(p), 'prompt')} x {tokens} tokens, scan {result.meta['seconds']:.1f} s, "
                      f"total {time.perf_counter() - t_start:.1f} s wall; raw state in {out}/state. "
                      f"Combine with: interp merge DIR... --out OUT", soft_wrap=True)
        if stopped is not None:
            stop(stopped, done, len(p), "prompts", out)
        run.finish()
        return
    heads = write_outputs(result, out, ood_result, tokenizer=m.tokenizer)
    top_sdh(heads, top)
    long_summary(heads, result)
    console.print(f"{escape(m.card.name)}: {plural(len(p), 'prompt')} x {tokens} tokens, scan {result.meta['seconds']:.1f} s, "
                  f"total {time.perf_counter() - t_start:.1f} s wall (model load and report included); "
                  f"wrote {out}/heads.csv and {out}/report.html", soft_wrap=True)
    if stopped is not None:
        stop(stopped, done, len(p), "prompts", out)
    run.finish()

