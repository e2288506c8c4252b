"""``interp sweep``: the same prompts' prefixes scanned at several lengths (paper 001's geometry against length).
Options and outputs: ``interp sweep --help``."""

from __future__ import annotations

import time
from pathlib import Path
from typing import List, Optional

import typer
from rich.markup import escape

from interp.cli.common import (
    ADDRESS, BLOCK_SIZE, CORPUS, DEVICE, DTYPE, EXECUTOR, MEASURE, MODEL, REPEATS, SEED, WORKERS, app,
    check_before_load, check_measures, check_paths, console, fail, int_list, plural, show_table,
)
from interp.cli.longrun import (FORCE, RESUME, Interrupted, interruptible, model_identity, open_run, scan_units,
                                 stop)
from interp.errors import InterpError


@app.command()
def sweep(
    model: str = MODEL,
    lengths: str = typer.Option("512,1024,2048", help="prefix lengths, comma-separated"),
    corpus: str = CORPUS,
    prompts: int = typer.Option(2, min=1, help="number of prompts"),
    seed: int = SEED,
    repeats: int = REPEATS,
    measure: List[str] = MEASURE,
    out: Path = typer.Option(Path("out/sweep"), help="output folder (created; sweep.csv, sweep.html, length_N/ go in it)"),
    beyond_context: bool = typer.Option(False, "--beyond-context", help="allow lengths beyond the model's context (out of distribution)"),
    cluster_points: int = typer.Option(400, min=2, help="points per head and prompt for silhouette / Davies-Bouldin and max q.k "
                                        "(half queries, half keys, seeded positions)"),
    block_size: int = BLOCK_SIZE,
    device: str = DEVICE,
    dtype: str = DTYPE,
    executor: str = EXECUTOR,
    workers: int = WORKERS,
    address: Optional[str] = ADDRESS,
    resume: bool = RESUME,
    force: bool = FORCE,
) -> None:
    """Scan the same prompts' prefixes at several lengths; write sweep.csv, sweep.html and one state folder per length.

    Every column of heads.csv plus the geometry of paper 001 (silhouette / Davies-Bouldin of the q and k clusters,
    key norms, attention received by token 0, maximum q.k per query), per length, layer and head.

    Each finished prompt at each length goes into OUT/units as the sweep runs (on Ray too): --resume continues an
    interrupted run, Ctrl-C / SIGTERM write the finished lengths' tables marked partial and exit 130 / 143.
    """
    check_measures(measure)
    t_start = time.perf_counter()
    ns = int_list(lengths, "--lengths", "512,1024,2048", allow_all=False) or []
    check_paths(out, writes="sweep.csv, sweep.html, length_N/", model=model)
    from interp.engine import ScanConfig
    from interp.engine.config import switch_on
    from interp.experiments.sweep import check_lengths, sweep as run_sweep

    try:
        ns = check_lengths(ns, max(ns or [0]), max(ns or [0]), beyond_context=True)  # integers >= 2; the context next
        cfg = switch_on(ScanConfig(block_size=block_size, geometry=True, cluster_points=cluster_points, counterfactual_queries=0), measure)
    except InterpError as err:
        fail(err)
    check_before_load(model, device=device, dtype=dtype, executor=executor, corpus=corpus, prompts=prompts, repeats=repeats, lengths=ns,
                      beyond_context=beyond_context)
    settings = {"model": model, "lengths": ns, "corpus": corpus, "prompts": prompts, "seed": seed, "repeats": repeats,
                "measure": sorted(measure), "beyond_context": beyond_context, "cluster_points": cluster_points,
                "block_size": block_size, "device": device, "dtype": dtype}
    run = open_run(out, "sweep", settings, resume, force)

    from interp import corpus as corpus_mod
    from interp.models import load_model
    from interp.engine.executor import ModelSpec, workers_for
    from interp.report.sweep_page import write_sweep_report

    try:
        with console.status(f"loading {model}"):
            m = load_model(model, device=device, dtype=dtype)
        ns = check_lengths(ns, max(ns or [0]), m.card.context_length, beyond_context)
        if ns[-1] > m.card.context_length:
            console.print(f"[yellow]warning:[/] lengths above {m.card.context_length} ({', '.join(str(n) for n in ns if n > m.card.context_length)}) "
                          f"are beyond {escape(m.card.name)}'s context: positions out of distribution", soft_wrap=True)
        p = corpus_mod.prompts(m, corpus, prompts, ns[-1], seed, beyond_context=beyond_context, repeats=repeats)
        spec = ModelSpec(model, str(m.device), dtype)
        run.begin(model_identity(m.card), len(ns) * len(p))

        late: list[Interrupted] = []  # a stop that came once the length's last unit was on disk

        def scan_length(n, prefixes, meta):  # one unit per prompt and length; a stop ends the sweep after the last unit
            if late:  # the length before finished all its units: it is kept, this one is not started
                raise late[0]
            res, stopped = scan_units(run, m, prefixes, range(len(prefixes)), cfg, meta, spec.engine, f"length-{n:06d}-prompt",
                                      beyond_context, actors)
            if stopped is not None and (res is None or res.meta["prompts"] < len(prefixes)):
                raise stopped
            late.extend([stopped] if stopped is not None else [])
            return res

        # Ray workers started before the signal handlers (ray.init sets its own SIGTERM handler)
        with workers_for(spec, executor, workers, address) as actors, interruptible():  # also between lengths
            result = run_sweep(m, p, ns, cfg, beyond_context=beyond_context, progress=True, meta={"corpus": corpus, "seed": seed},
                               spec=spec, scan_fn=scan_length, stop_on=(Interrupted,))
    except InterpError as err:
        fail(err)
    except Interrupted as err:  # outside the sweep's loop over lengths
        stop(err, 0, len(ns), "lengths", out)
    if result.stopped is not None and not result.results:
        stop(result.stopped, 0, len(ns), "lengths", out)
    t_write = time.perf_counter()
    with console.status(f"writing {out}"):
        result.save(out)
        write_sweep_report(result, out / "sweep.html")
    t_write = time.perf_counter() - t_write
    table = result.table
    summary = table.groupby("length")[["sink_weight", "max_qk_rot", "srank_k_rot", "silhouette_rot", "cos_qk_rot"]].median().reset_index()
    show_table(summary, "Median over heads by length", list(summary.columns), len(summary))
    scans = sum(t["scan"] for t in result.seconds.values())
    fin = sum(t["finalise"] for t in result.seconds.values())
    console.print(f"{escape(m.card.name)}: {plural(len(p), 'prompt')} at {plural(len(result.lengths), 'length')}, scans {scans:.1f} s, "
                  f"finalising {fin:.1f} s, writing {t_write:.1f} s, total {time.perf_counter() - t_start:.1f} s wall; "
                  f"wrote {out}/sweep.csv and {out}/sweep.html", soft_wrap=True)
    if result.stopped is not None:
        stop(result.stopped, len(result.results), len(ns), "lengths", out)
    run.finish()
