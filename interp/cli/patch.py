"""``interp patch``: activation patching per head (and position), attribution patching, path patching, on clean /
corrupt pairs from a file or a built-in task. Options and outputs: ``interp patch --help``."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from interp.cli.common import (ADDRESS, ATLAS, DEVICE, DTYPE, EXECUTOR, MODEL, RETRIES, SEED, WORKERS, app,
                               check_before_load, check_paths, console, fail, parse_heads, plural, show_table,
                               top_option)
from interp.cli.longrun import FORCE, RESUME, Interrupted, file_sha256, interruptible, model_identity, open_run, stop
from interp.errors import InterpError

METHODS = ("exact", "naive", "attribution")


def _check_options(pairs: Optional[Path], task: Optional[str], method: str, paths: Optional[str], positions: str,
                   n_pairs: Optional[int]) -> None:
    """The option combinations refused before anything is read (raises ``InterpError``)."""
    from interp.experiments.patch_tasks import TASKS

    if (pairs is None) == (task is None):
        raise InterpError("give either --pairs PAIRS.jsonl or --task (ioi, induction, greater-than), not both or neither")
    if task is not None and task not in TASKS:
        raise InterpError(f"unknown --task {task!r}; use one of {', '.join(TASKS)}")
    if method not in METHODS:
        raise InterpError(f"unknown --method {method!r}; use exact, naive or attribution")
    if paths is not None and (method != "exact" or positions != "all"):
        raise InterpError("--paths runs exact path patching at every position; drop --method / --positions each")
    if n_pairs is not None and n_pairs < 1:
        raise InterpError(f"--n-pairs must be >= 1, got {n_pairs}")


def _pairs(tokenizer, pairs: Optional[Path], records, task: Optional[str], n_pairs: Optional[int], seed: int, cfg):
    """Tokenised, checked pairs from the file's records or the task (raises ``InterpError``)."""
    from interp.experiments.patch_tasks import check_one_template, task_pairs, tokenize_pairs

    if task is not None:
        out = task_pairs(task, tokenizer, n_pairs or 64, seed, one_template=cfg.positions == "each")
    else:
        out = tokenize_pairs(tokenizer, records[:n_pairs] if n_pairs else records, cfg.metric, where=pairs.name)
    if cfg.positions == "each":
        check_one_template(out)
    return out


@app.command()
def patch(
    model: str = MODEL,
    pairs: Optional[Path] = typer.Option(None, help="JSONL, one {\"clean\", \"corrupt\", \"answer\", \"wrong\"} object per "
                                         "line (clean and corrupt of equal token lengths)"),
    task: Optional[str] = typer.Option(None, help="a built-in task instead of --pairs: ioi | induction | greater-than"),
    n_pairs: Optional[int] = typer.Option(None, help="pairs of --task (default 64), or the first N of --pairs"),
    seed: int = SEED,
    heads: str = typer.Option("all", help="all, or LAYER:HEAD pairs to patch (with --paths: the receivers)"),
    direction: str = typer.Option("denoise", help="denoise (corrupt run, clean head output patched in) | noise (the reverse)"),
    positions: str = typer.Option("all", help="all (a head at every position) | each (one row per head and position; "
                                  "pairs of one template)"),
    method: str = typer.Option("exact", help="exact (cached residual stream, heads batched) | naive (one full forward per "
                               "head and pair: the reference) | attribution (first-order estimate from one backward)"),
    paths: Optional[str] = typer.Option(None, help="sender heads LAYER:HEAD,...: path patching to every later head (or "
                                        "--heads) through its query, key and value; writes paths.csv"),
    metric: str = typer.Option("logit_diff", help="logit_diff (logit of answer minus logit of wrong at the last position) | nll "
                               "(NLL of the answer, or of the clean prompt's last token where a pair has no answer)"),
    bootstrap: int = typer.Option(1000, min=0, max=100_000, help="pair resamples for the 95% interval of recovered"),
    atlas: Optional[Path] = ATLAS,
    effects: Optional[Path] = typer.Option(None, help="an effects.csv (interp effects) whose dnll the page shows on hover"),
    max_batch_gb: float = typer.Option(1.0, help="bound on one forward's activations, which sets the rows per forward"),
    out: Path = typer.Option(Path("out/patch"), help="output folder (created; patch.csv, patch.json, patch.html, paths.csv)"),
    device: str = DEVICE,
    dtype: str = DTYPE,
    top: int = top_option("largest-recovery"),
    executor: str = EXECUTOR,
    workers: int = WORKERS,
    address: Optional[str] = ADDRESS,
    retries: int = RETRIES,
    resume: bool = RESUME,
    force: bool = FORCE,
) -> None:
    """Activation patching: which heads carry a behaviour, from a clean and a corrupted run (per head, position, path).

    Per head, the corrupt prompt runs with the head's output
    taken from the clean run (denoise; noise: the reverse); recovered = (mean LD patched - mean LD corrupt) / (mean LD
    clean - mean LD corrupt), LD = logit of the answer minus logit of the wrong token at the last position, with a 95% bootstrap interval
    over pairs (Wang et al. 2022; Heimersheim and Nanda 2024). --method attribution: Nanda 2023's first-order
    estimate; --paths: path patching (Wang et al. 2022, App. B). --executor ray splits the heads by layer over Ray
    workers that each hold the model (a killed worker is restarted and its chunk retried, --retries times).
    With --method exact each finished layer (with --paths: each finished sender) goes into OUT/units as the run goes
    (on Ray the driver writes each layer's unit as its chunk comes back, the same files as a local run):
    --resume continues an interrupted run (a Ray run on Ray or locally, and the reverse), Ctrl-C / SIGTERM write the
    finished layers' (senders') rows marked partial and exit 130 / 143.

    Writes patch.csv (layer, head, pos with --positions each, direction, ld, recovered, recovered_lo, recovered_hi),
    patch.json (clean and corrupt mean LD and accuracy, settings, timing), patch.html (a layer x head grid) and, with
    --paths, paths.csv (sender_layer, sender_head, receiver_layer, receiver_head, via, recovered).

    Bad pairs files (bad JSON, missing keys, clean / corrupt of different token lengths, an answer empty after
    tokenisation, an empty file) are refused with one line naming the line, before the model loads: the tokenizer is
    loaded alone for tiny models, local folders and zoo models loaded before (their converted copy); otherwise
    (a hub id, a zoo model's first load) everything without a tokenizer is checked first and the token checks run
    right after the load, before any forward.
    """
    t_start = time.perf_counter()
    from interp.experiments.patch_tasks import read_pairs
    from interp.models.grid import load_tokenizer
    from interp.experiments.patching import PatchConfig

    try:
        _check_options(pairs, task, method, paths, positions, n_pairs)
        cfg = PatchConfig(heads=parse_heads(heads), direction=direction, positions=positions, metric=metric,
                          bootstrap=bootstrap, seed=seed, max_batch_gb=max_batch_gb)
        senders = parse_heads(paths) if paths is not None else None
        if paths is not None and senders is None:
            raise InterpError("--paths takes sender heads LAYER:HEAD,... (not 'all')")
        cfg.check()
        if executor == "ray" and (method != "exact" or paths is not None):
            raise InterpError("--executor ray runs exact per-head patching (--method exact without --paths)")
    except InterpError as err:
        fail(err)
    check_before_load(model, device=device, dtype=dtype, executor=executor, heads=(cfg.heads or ()) + (senders or ()))
    check_paths(out, writes="patch.csv, patch.json, patch.html", files={"--pairs": pairs, "--atlas": atlas, "--effects": effects},
                model=model)
    settings = {"model": model, "pairs": f"{pairs} (sha256 {file_sha256(pairs)[:16]})" if pairs is not None else None,
                "task": task, "n_pairs": n_pairs, "seed": seed, "heads": heads, "direction": direction,
                "positions": positions, "method": method, "paths": paths, "metric": metric, "bootstrap": bootstrap,
                "max_batch_gb": max_batch_gb, "device": device, "dtype": dtype}
    units = method == "exact"  # on Ray too (the driver writes each unit as its chunk comes back)
    run = open_run(out, "patch", settings, resume, force, f"--resume needs --method exact (--method {method} keeps no "
                   "units: per layer, or per sender with --paths)" if resume and not units else None)
    try:
        records = read_pairs(pairs, metric) if pairs is not None else None
        tok = load_tokenizer(model)
        got = _pairs(tok, pairs, records, task, n_pairs, seed, cfg) if tok is not None else None
    except InterpError as err:
        fail(err)

    import pandas as pd

    from interp.engine.executor import ModelSpec, workers_for
    from interp.experiments.path_patching import path_patch
    from interp.experiments.patching import attribution_patch_heads, naive_patch_heads, patch_heads
    from interp.models import load_model
    from interp.report.patch_page import write_patch

    try:
        with console.status(f"loading {model}"):
            m = load_model(model, device=device, dtype=dtype)
        cfg.check(m.card.n_layers, m.card.n_heads)
        if got is None:
            got = _pairs(m.tokenizer, pairs, records, task, n_pairs, seed, cfg)
        n_layers = len({l for l, _ in cfg.heads}) if cfg.heads is not None else m.card.n_layers
        what, total = ("senders", len(set(senders))) if senders is not None else ("layers", n_layers)
        run.begin(model_identity(m.card), total * len({len(p.clean) for p in got}) if units else 0)
        fn = {"exact": patch_heads, "naive": naive_patch_heads, "attribution": attribution_patch_heads}[method]
        kw = {"store": run.units_dir, "stop_on": (Interrupted,)} if units else {}
        if senders is not None:
            fn = lambda m_, got_, cfg_, progress, **kw_: path_patch(m_, got_, senders, cfg_, progress=progress, **kw_)  # noqa: E731
        elif executor == "ray":
            from interp.experiments.sharded import patch_on_workers

            def fn(_m, got_, cfg_, progress, **kw_):  # each worker loads its own copy of the model
                return patch_on_workers(spec, got_, cfg_, actors=actors, **kw_)
        elif units:
            kw["log"] = lambda s: console.print(escape(s), soft_wrap=True)
        spec = ModelSpec(model, device, dtype)
        try:  # Ray workers started before the signal handlers (ray.init sets its own SIGTERM handler)
            with workers_for(spec, executor, workers, address, retries) as actors, interruptible():
                res = fn(m, got, cfg, progress=True, **kw)
        except Interrupted as err:  # --method naive / attribution, or Ray before any unit was finished: nothing to write
            stop(err, 0, total, what, out)
        if isinstance(res.stopped, Interrupted) and not len(res.table):  # no layer (sender) finished for every length
            stop(res.stopped, 0, total, what, out)
    except InterpError as err:
        fail(err)
    res.meta.update(source=str(pairs) if pairs is not None else f"task:{task}", seed=seed)
    read = lambda p: pd.read_csv(p) if p is not None else None  # noqa: E731
    labels = [m.tokenizer.decode([i]) for i in got[0].clean] if positions == "each" else None
    written = write_patch(res, out, read(atlas), read(effects), labels)
    short = "LD" if metric == "logit_diff" else "NLL"
    acc = (f" (accuracy {res.meta['clean_accuracy']:.0%} / {res.meta['corrupt_accuracy']:.0%})"
           if "clean_accuracy" in res.meta else "")
    t = res.table
    show_table(t.reindex(t["recovered"].abs().sort_values(ascending=False).index),
               "Largest |recovered| (share of the clean-corrupt gap)", list(t.columns), top)
    console.print(f"{escape(m.card.name)}: {plural(len(got), 'pair')}, clean {short} {res.clean.mean():.4f}, corrupt "
                  f"{short} {res.corrupt.mean():.4f}{acc}; {len(t)} rows in {res.meta['seconds']:.1f} s "
                  f"({res.meta['method']}), total {time.perf_counter() - t_start:.1f} s wall; wrote "
                  f"{', '.join(f'{out}/{n}' for n in written)}", soft_wrap=True)
    if isinstance(res.stopped, Interrupted):
        finished = len(t[["sender_layer", "sender_head"]].drop_duplicates()) if senders is not None else t["layer"].nunique()
        stop(res.stopped, finished, total, what, out)
    run.finish()
