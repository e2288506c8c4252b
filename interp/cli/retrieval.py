"""``interp retrieval``: retrieval heads (Wu et al. 2024): needle-in-a-haystack decoding, each head's top-1 copy score.
Options and outputs: ``interp retrieval --help``."""

from __future__ import annotations

import json
import time
from pathlib import Path

import typer
from rich.markup import escape

from interp.cli.common import (
    DEVICE, DTYPE, MODEL, app, check_before_load, check_paths, console, fail, float_list, int_list, plural, show_table,
    top_option,
)
from interp.cli.longrun import FORCE, RESUME, Interrupted, interruptible, model_identity, open_run, stop
from interp.errors import InterpError


@app.command()
def retrieval(
    model: str = MODEL,
    lengths: str = typer.Option("256,512,1024", help="prompt lengths in tokens (BOS, haystack, needle and question), comma-separated"),
    depths: str = typer.Option("0.1,0.3,0.5,0.7,0.9", help="needle depths, fractions of the haystack, comma-separated"),
    needles: int = typer.Option(1, min=1, help="random needles per (length, depth)"),
    seed: int = typer.Option(0, help="needle and haystack seed"),
    max_new_tokens: int = typer.Option(50, min=1, help="greedy decode budget (Wu et al.: 50)"),
    top_k: int = typer.Option(1, min=1, help="attended positions checked per head and step (Wu et al.: 1)"),
    gate: float = typer.Option(0.5, help="ROUGE-1 recall a trial needs to count in retrieval_score (Wu et al.: 0.5)"),
    template: str = typer.Option("auto", help="auto | plain | chat: the prompt around the haystack (auto: chat where the tokenizer has one)"),
    out: Path = typer.Option(Path("out/retrieval"), help="output folder (created; retrieval.csv, retrieval_summary.csv, retrieval_trials.csv go in it)"),
    top: int = top_option("retrieval-head"),
    device: str = DEVICE,
    dtype: str = DTYPE,
    resume: bool = RESUME,
    force: bool = FORCE,
) -> None:
    """Retrieval heads (Wu et al. 2024): needle-in-a-haystack on pydoc text, greedy decode, each head's top-1 attention.

    A head's retrieval score is the share of needle tokens it copies (top-1 attention on the needle position whose
    token the model generates), averaged over the trials the model itself answers (ROUGE-1 recall > --gate).
    Writes retrieval.csv (layer, head, kv_head, retrieval_score, retrieval_score_all, hits, hits_all,
    trials_retrieved, trials), retrieval_summary.csv (copy accuracy per length and depth), retrieval_trials.csv
    (every prompt: needle position, answer, response, ROUGE-1 recall) and retrieval.json (model, settings, trials,
    seconds; "partial" when stopped).

    Each finished trial goes into OUT/units as the run goes: --resume continues an interrupted run, Ctrl-C / SIGTERM
    write the tables of the finished trials (a partial line, "partial": "K of N trials" in retrieval.json; run.json
    stays incomplete) and exit 130 / 143.
    """
    t_start = time.perf_counter()
    from interp.experiments.retrieval import RetrievalConfig, run_retrieval

    try:
        cfg = RetrievalConfig(lengths=tuple(int_list(lengths, "--lengths", "256,512,1024", allow_all=False) or []),
                              depths=tuple(float_list(depths, "--depths", "0.1,0.5,0.9")), needles=needles, seed=seed,
                              max_new_tokens=max_new_tokens, top_k=top_k, gate=gate, template=template).check()
    except InterpError as err:
        fail(err)
    check_paths(out, writes="retrieval.csv, retrieval_summary.csv, retrieval_trials.csv, retrieval.json", model=model)
    shape = check_before_load(model, device=device, dtype=dtype)
    if shape is not None:
        try:
            cfg.check(shape.context_length)
        except InterpError as err:
            fail(err)
    settings = {"model": model, "lengths": list(cfg.lengths), "depths": list(cfg.depths), "needles": needles, "seed": seed,
                "max_new_tokens": max_new_tokens, "top_k": top_k, "gate": gate, "template": template, "device": device,
                "dtype": dtype}
    run = open_run(out, "retrieval", settings, resume, force)

    from interp.io import write_text_atomic
    from interp.models import load_model
    from interp.report.bundle import write_csv

    try:
        with console.status(f"loading {model}"):
            m = load_model(model, device=device, dtype=dtype)
        n_trials = len(cfg.lengths) * len(cfg.depths) * cfg.needles
        run.begin(model_identity(m.card), n_trials)
        with interruptible():
            result = run_retrieval(m, cfg, progress=True, log=lambda s: console.print(escape(s), soft_wrap=True),
                                   store=run.units_dir, stop_on=(Interrupted,))
    except InterpError as err:
        fail(err)
    except Interrupted as err:  # before the first trial (the haystack's tokenisation)
        stop(err, 0, n_trials, "trials", out)
    if result.stopped is not None and result.trials.empty:
        stop(result.stopped, 0, n_trials, "trials", out)
    out.mkdir(parents=True, exist_ok=True)
    write_csv(result.heads, out / "retrieval.csv")
    summary = result.summary
    write_csv(summary, out / "retrieval_summary.csv")
    write_csv(result.trials, out / "retrieval_trials.csv")
    n_ok, n = int(result.trials["retrieved"].sum()), len(result.trials)
    write_text_atomic(out / "retrieval.json", json.dumps({**result.meta, "settings": settings, "trials": n, "retrieved": n_ok,
                                                          "seconds": result.seconds}, indent=2, default=str))
    show_table(summary, "Copy accuracy: mean ROUGE-1 recall of the answer, share of trials retrieved", list(summary.columns), len(summary))
    key = "retrieval_score" if n_ok else "retrieval_score_all"
    heads = result.heads.sort_values(key, ascending=False)
    show_table(heads, f"Top heads by {key} ({n_ok} of {plural(n, 'trial')} retrieved)",
          ["layer", "head", "kv_head", "retrieval_score", "retrieval_score_all", "hits", "hits_all"], top)
    if not n_ok:
        console.print(f"[yellow]warning:[/] {escape(m.card.name)} answered none of the {n} prompts (ROUGE-1 recall > {gate:g}): "
                      "retrieval_score is empty; retrieval_score_all scores every trial", soft_wrap=True)
    console.print(f"{escape(m.card.name)}: {plural(n, 'trial')}, {n_ok} retrieved; {result.seconds:.1f} s decoding, "
                  f"total {time.perf_counter() - t_start:.1f} s wall; wrote {out}/retrieval.csv", soft_wrap=True)
    if result.stopped is not None:
        stop(result.stopped, n, n_trials, "trials", out)
    run.finish()
