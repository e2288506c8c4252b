"""``interp effects``: causal head effects (zero, mean, streaming, RoPE bands; exact, naive or attribution). Options and
outputs: ``interp effects --help``."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from interp.cli.common import (ADDRESS, ATLAS, DEVICE, DTYPE, EXECUTOR, MODEL, PROMPTS, RETRIES, SEED, WORKERS, app,
                               check_before_load, check_paths, console, fail, parse_heads, plural, show_table, tokens_option,
                               top_option)
from interp.cli.longrun import FORCE, RESUME, Interrupted, interruptible, model_identity, open_run, stop
from interp.errors import InterpError


@app.command()
def effects(
    model: str = MODEL,
    corpus: str = typer.Option("pydoc", help="pydoc | stdlib | random | repeated-random"),
    prompts: int = PROMPTS,
    tokens: int = tokens_option(256),
    seed: int = SEED,
    interventions: Optional[str] = typer.Option(None, help="comma-separated: zero, mean, streaming, rope_high, rope_medium, "
                                                "rope_low, nope", show_default="zero,mean,streaming; zero,mean with --method attribution"),
    heads: str = typer.Option("all", help="all, or LAYER:HEAD pairs, e.g. 3:1,17:0"),
    sink: int = typer.Option(4, help="streaming: keys 0..SINK-1 stay visible (DuoAttention: 128 on long contexts)"),
    window: int = typer.Option(64, help="streaming: the last WINDOW keys stay visible, the query included (DuoAttention: 256)"),
    n_remove: int = typer.Option(6, min=1, help="rope_*: planes of the band left unrotated (paper 004: 6)"),
    bootstrap: int = typer.Option(1000, min=0, max=100_000, help="prompt resamples for the 95% interval of dnll (0: the "
                                  "interval is the estimate itself)"),
    method: str = typer.Option("exact", help="exact (cached residual stream, heads batched) | naive (one full forward per "
                               "head, intervention and prompt: the reference) | attribution (linearised zero / mean effects "
                               "from one forward and one backward per prompt; kl empty)"),
    atlas: Optional[Path] = ATLAS,
    max_logits_gb: float = typer.Option(1.0, help="bound on one forward's logits (rows x tokens x vocab float32)"),
    out: Path = typer.Option(Path("out/effects"), help="output folder (created; effects.csv, effects.json, effects.html go in it)"),
    device: str = DEVICE,
    dtype: str = DTYPE,
    top: int = top_option("largest-effect"),
    executor: str = EXECUTOR,
    workers: int = WORKERS,
    address: Optional[str] = ADDRESS,
    retries: int = RETRIES,
    resume: bool = RESUME,
    force: bool = FORCE,
) -> None:
    """Causal head effects: how much the next-token loss rises when each head is zeroed, mean-ablated, streamed or unrotated.

    Next-token NLL change (with a 95% bootstrap interval over prompts) and KL when each head is
    zeroed, mean-ablated, restricted to DuoAttention's A-shape (streaming) or has RoPE planes unrotated; --method
    attribution gives the linearised zero / mean effects (Nanda 2023; Syed et al. 2023) from one backward pass.

    Writes effects.csv (layer, head, intervention, dnll, dnll_lo, dnll_hi, kl; atomically: an interrupted run leaves
    no new file), effects.json (clean NLL, settings, timing) and effects.html (a layer x head grid per intervention).
    With --method exact each finished layer goes into OUT/units as the run goes: --resume continues an interrupted
    run, Ctrl-C / SIGTERM write the finished layers' rows marked partial and exit 130 / 143. --executor ray splits the
    heads by layer over Ray workers that each hold the model (a killed worker is restarted and its chunk retried,
    --retries times); the table equals a local run's. On Ray the driver writes each layer's unit as its chunk comes
    back, so a stopped or killed driver resumes too (on Ray or locally).
    """
    t_start = time.perf_counter()
    from interp.experiments.effects import EffectsConfig, parse_interventions

    if method not in ("exact", "naive", "attribution"):
        fail(InterpError(f"unknown --method {method!r}; use exact, naive or attribution"))
    if interventions is None:
        interventions = "zero,mean" if method == "attribution" else "zero,mean,streaming"
    try:
        cfg = EffectsConfig(interventions=parse_interventions(interventions), heads=parse_heads(heads), sink=sink, window=window,
                            n_remove=n_remove, bootstrap=bootstrap, seed=seed, max_logits_gb=max_logits_gb)
        bad = [k for k in cfg.interventions if k not in ("zero", "mean")]
        if method == "attribution" and bad:
            raise InterpError(f"--method attribution linearises zero and mean only, got {', '.join(bad)}; use --method exact for them")
        cfg.check(n_tokens=tokens)
    except InterpError as err:
        fail(err)
    check_before_load(model, device=device, dtype=dtype, executor=executor, corpus=corpus, prompts=prompts, tokens=tokens,
                      heads=cfg.heads)
    if "streaming" in cfg.interventions and sink + window >= tokens:
        console.print(f"[yellow]warning:[/] --sink {sink} and --window {window} keep every key of a {tokens}-token prompt "
                      f"visible: streaming changes nothing (dnll 0); use --window below {max(tokens - sink, 1)} or more --tokens",
                      soft_wrap=True)
    check_paths(out, writes="effects.csv, effects.json, effects.html", files={"--atlas": atlas}, model=model)
    settings = {"model": model, "corpus": corpus, "prompts": prompts, "tokens": tokens, "seed": seed,
                "interventions": list(cfg.interventions), "heads": heads, "sink": sink, "window": window, "n_remove": n_remove,
                "bootstrap": bootstrap, "method": method, "max_logits_gb": max_logits_gb, "device": device, "dtype": dtype}
    refuse = None
    if resume and method != "exact":
        refuse = f"--resume needs --method exact (--method {method} keeps no per-layer units)"
    elif executor == "ray" and method != "exact":
        refuse = f"--executor ray runs --method exact only (got --method {method}); run it locally"
    run = open_run(out, "effects", settings, resume, force, refuse)

    import pandas as pd

    from interp import corpus as corpus_mod
    from interp.engine.executor import ModelSpec, workers_for
    from interp.experiments.attribution import attribution_effects
    from interp.experiments.sharded import effects_on_workers
    from interp.experiments.effects import LayerStore, head_effects, naive_effects
    from interp.models import load_model
    from interp.report.effects_page import MIN_PROMPTS, write_effects

    try:
        with console.status(f"loading {model}"):
            m = load_model(model, device=device, dtype=dtype)
        cfg.check(m.card.n_layers, m.card.n_heads, tokens)
        p = corpus_mod.prompts(m, corpus, prompts, tokens, seed)
        fn = {"exact": head_effects, "naive": naive_effects, "attribution": attribution_effects}[method]
        n_layers = len({l for l, _ in cfg.heads}) if cfg.heads is not None else m.card.n_layers
        run.begin(model_identity(m.card), n_layers if method == "exact" else 0)
        kw = {"store": LayerStore(run.units_dir), "stop_on": (Interrupted,)} if method == "exact" else {}
        if executor == "local" and kw:
            kw["log"] = lambda s: console.print(escape(s), soft_wrap=True)
        spec = ModelSpec(model, device, dtype)
        if executor != "local":
            def fn(_m, toks, config, progress, **kw_):  # each worker loads its own copy of the model
                return effects_on_workers(spec, toks, config, actors=actors, **kw_)
        try:  # Ray workers started before the signal handlers (ray.init sets its own SIGTERM handler)
            with workers_for(spec, executor, workers, address, retries) as actors, interruptible():
                res = fn(m, p, cfg, progress=True, **kw)
        except Interrupted as err:  # before the clean pass (on Ray: the first chunk) or --method naive / attribution
            stop(err, len(run.finished()), n_layers, "layers", out)
    except InterpError as err:
        fail(err)
    res.meta.update(corpus=corpus, seed=seed, n_layers=m.card.n_layers, n_heads=m.card.n_heads)  # the page's whole grid
    written = write_effects(res, out, pd.read_csv(atlas) if atlas is not None else None)
    t = res.table
    show_table(t.reindex(t["dnll"].abs().sort_values(ascending=False).index), "Largest effects (dnll, nats per prediction)",
          list(t.columns), top)
    if len(p) < MIN_PROMPTS:
        console.print(f"[yellow]warning:[/] the 95% intervals rest on {plural(len(p), 'prompt')} (resampled): too few to "
                      f"trust; use --prompts {MIN_PROMPTS} or more", soft_wrap=True)
    console.print(f"{escape(m.card.name)}: {plural(len(p), 'prompt')} x {tokens} tokens, clean NLL {res.clean_nll:.4f} nats; "
                  f"{len(t)} head x intervention rows in {res.meta['seconds']:.1f} s ({method}), total "
                  f"{time.perf_counter() - t_start:.1f} s wall; wrote {', '.join(str(path) for path in written.values())} "
                  f"(and the run's state for --resume: {run.manifest_path}, {run.units_dir}/)", soft_wrap=True)
    if isinstance(res.stopped, Interrupted):
        stop(res.stopped, t["layer"].nunique(), n_layers, "layers", out)
    run.finish()
