"""``interp trajectory``: the per-head table of a scan at every saved checkpoint of a training run (issue 35). Options and
outputs: ``interp trajectory --help``; the logic is ``interp.experiments.trajectory``."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import List, Optional

import typer
from rich.markup import escape

from interp.cli.common import (DEVICE, ENGINE, MEASURE, PROMPTS, REPEATS, SEED, app, check_before_load, check_measures,
                               check_paths, console, fail, plural, tokens_option)
from interp.cli.longrun import FORCE, RESUME, Interrupted, interruptible, open_run, stop
from interp.errors import InterpError


@app.command()
def trajectory(
    source: str = typer.Argument(..., help="a folder of saved checkpoints (one model folder each, e.g. step-100/, and "
                                 "optionally train_log.csv with columns step, loss), or a Hugging Face hub id ORG/NAME "
                                 "whose --revisions are in the local cache"),
    revisions: Optional[str] = typer.Option(None, help="comma-separated subfolders (or hub revisions) in order",
                                            show_default="every model subfolder, by the number in its name"),
    corpus: str = typer.Option("repeated-random", help="probe prompts, the same at every checkpoint: pydoc | stdlib | random | "
                               "repeated-random (BOS, r, r: induction heads' input)"),
    prompts: int = PROMPTS,
    tokens: int = tokens_option(128, "tokens per probe prompt"),
    seed: int = SEED,
    repeats: int = REPEATS,
    measure: List[str] = MEASURE,
    out: Path = typer.Option(Path("out/trajectory"), help="output folder (created; trajectory.csv and trajectory.html go in it)"),
    device: str = DEVICE,
    engine: str = ENGINE,
    resume: bool = RESUME,
    force: bool = FORCE,
) -> None:
    """Scan every checkpoint of a training run on the same probe prompts: every measure of every head against step.

    One row per (checkpoint, layer, head) with
    every enabled measure (token-matched scores and entropy are on by default), and a page with each measure against
    step for every head, coloured by its role at the last checkpoint.

    Checks every checkpoint first (a folder with no model, a revision that does not exist, mixed architectures: one
    line, exit 2, before any scan). Writes trajectory.csv (columns: step, revision, train_loss when the folder has a
    train_log.csv, scan_seconds, then heads.csv's), trajectory.html (its loss panel from train_log.csv) and
    trajectory.json (source, settings, the checkpoints scanned; "partial" when stopped).

    A folder of checkpoints with their training log, from a small lab model (a few minutes on a CPU):
    python -m interp.lab.checkpoints runs/induction --steps 300 --save-every 50, then
    interp trajectory runs/induction --out out/trajectory.

    Each finished checkpoint's rows go into OUT/units as the run goes: --resume continues an interrupted run (the
    checkpoints and settings must be the same), Ctrl-C / SIGTERM write the finished checkpoints' rows and page marked
    partial ("partial": "K of N checkpoints" in trajectory.json) and exit 130 / 143.
    """
    t_start = time.perf_counter()
    check_measures(measure)
    check_paths(out, writes="trajectory.csv, trajectory.html, trajectory.json")
    check_before_load(device=device, engine=engine, corpus=corpus, prompts=prompts, tokens=tokens, repeats=repeats)
    from interp.experiments.trajectory import add_train_loss, checkpoint_trajectory, find_checkpoints, training_log

    try:
        cks = find_checkpoints(source, [r.strip() for r in revisions.split(",") if r.strip()] if revisions else None)
        log = training_log(source)
    except InterpError as err:
        fail(err)
    check_before_load(f"local:{cks[0].path}", tokens=tokens)  # the first checkpoint's context, from its config.json
    settings = {"source": str(source), "revisions": [c.label for c in cks], "corpus": corpus, "prompts": prompts,
                "tokens": tokens, "seed": seed, "repeats": repeats, "measure": sorted(measure), "device": device,
                "engine": engine}
    run = open_run(out, "trajectory", settings, resume, force)

    from interp import corpus as corpus_mod
    from interp.engine import ScanConfig
    from interp.engine.config import switch_on
    from interp.io import write_atomic, write_text_atomic
    from interp.report.trajectory_page import write_trajectory_page

    try:
        cfg = switch_on(ScanConfig(), sorted({"token_match", "shape", *measure}))
        # the checkpoints' identity is their labels and folders (settings); their weights are not hashed
        run.begin({"name": str(source), "paths": [str(c.path) for c in cks]}, len(cks))
        with interruptible():
            traj = checkpoint_trajectory(cks, lambda m: corpus_mod.prompts(m, corpus, prompts, tokens, seed, repeats=repeats),
                                         cfg, progress=True, engine=engine, device=device, store=run.units_dir,
                                         stop_on=(Interrupted,))
    except InterpError as err:
        fail(err)
    except Interrupted as err:  # outside a checkpoint's scan (the bar's start)
        stop(err, 0, len(cks), "checkpoints", out)
    partial, stopped = traj.attrs.pop("partial", None), traj.attrs.pop("stopped", None)
    if stopped is not None and traj.empty:
        stop(stopped, 0, len(cks), "checkpoints", out)
    if log is not None:
        traj = add_train_loss(traj, log)
    out.mkdir(parents=True, exist_ok=True)
    write_trajectory_page(traj, out / "trajectory.html", log, title=str(source), partial=partial)
    write_atomic(out / "trajectory.csv", lambda tmp: traj.to_csv(tmp, index=False))
    done = traj["revision"].nunique()
    write_text_atomic(out / "trajectory.json", json.dumps({"source": str(source), "settings": settings,
                                                           "checkpoints": list(traj["revision"].unique()),
                                                           **({"partial": partial} if partial else {})}, indent=2))
    console.print(f"{escape(str(source))}: {plural(done, 'checkpoint')} x {plural(prompts, 'prompt')} of {tokens} tokens "
                  f"({escape(corpus)}), {len(traj)} rows, {traj.groupby('revision')['scan_seconds'].first().mean():.2f} s per "
                  f"checkpoint's scan, {time.perf_counter() - t_start:.1f} s in all; wrote {out}/trajectory.csv and "
                  f"{out}/trajectory.html", soft_wrap=True)
    if stopped is not None:
        stop(stopped, done, len(cks), "checkpoints", out)
    run.finish()
