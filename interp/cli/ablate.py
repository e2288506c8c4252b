"""``interp ablate``: frequency band ablation (paper 004 Table 5, Fig. 8), counterfactual and with ``--causal`` in the
model itself. Options and outputs: ``interp ablate --help``."""

from __future__ import annotations

import time
from pathlib import Path
from typing import List, Optional

import typer
from rich.markup import escape

from interp.cli.common import (
    ADDRESS, BLOCK_SIZE, CORPUS, DEVICE, DTYPE, ENGINE, EXECUTOR, MEASURE, MODEL, PROMPTS, REPEATS, SEED, TOKENS, WORKERS,
    app, check_before_load, check_measures, check_paths, console, fail, int_list, plural, show_table,
)
from interp.cli.longrun import (FORCE, RESUME, Interrupted, interruptible, model_identity, open_run, scan_units,
                                 stop)
from interp.errors import InterpError


@app.command()
def ablate(
    model: str = MODEL,
    corpus: str = CORPUS,
    prompts: int = PROMPTS,
    tokens: int = TOKENS,
    seed: int = SEED,
    repeats: int = REPEATS,
    measure: List[str] = MEASURE,
    out: Path = typer.Option(Path("out/ablate"), help="output folder (created; band_ablation.csv, heads.csv, report.html, state/ go in it)"),
    n_remove: int = typer.Option(6, min=1, help="planes left unrotated per band (paper 004: 6)"),
    planes: Optional[str] = typer.Option(None, help="also ablate this set of planes, e.g. 0,1,2 (named 'custom')"),
    variant: List[str] = typer.Option([], help="also any RoPE variant: partial:F, p-rope:F, rope-id, pi:X, yarn:X, scaled:X, shuffled:SEED (repeatable)"),
    all_heads: bool = typer.Option(False, "--all-heads", help="band_ablation.csv for every head, not only the SDHs"),
    causal: bool = typer.Option(False, "--causal", help="also run the model itself with each band unrotated (NLL, downstream changes)"),
    layers: Optional[str] = typer.Option(None, help="layers of the causal ablation, e.g. 0,1,2 (default all)"),
    block_size: int = BLOCK_SIZE,
    device: str = DEVICE,
    dtype: str = DTYPE,
    engine: str = ENGINE,
    executor: str = EXECUTOR,
    workers: int = WORKERS,
    address: Optional[str] = ADDRESS,
    resume: bool = RESUME,
    force: bool = FORCE,
) -> None:
    """Frequency band ablation (paper 004 Table 5, Fig. 8): slash scores with high / medium / low planes unrotated.

    Writes band_ablation.csv (layer, head, delta, original, wo_high, wo_medium, wo_low, ratios), the scan's
    outputs (heads.csv, report.html with a frequencies section, state/), and with --causal causal_ablation.csv
    (band, layers, nll_original, nll, delta_nll) and causal_heads.csv (per-head slash and sink changes).

    Each finished prompt's state goes into OUT/units as the scan runs (on Ray too): --resume continues an
    interrupted run, Ctrl-C / SIGTERM write partial tables from the finished prompts and exit 130 / 143 (during
    --causal: the scan's tables complete, the causal tables not written; each finished band of the causal ablation
    is kept in OUT/units too, and read back on --resume).
    """
    check_measures(measure)
    t_start = time.perf_counter()
    extra = {"custom": int_list(planes, "--planes", "0,1,2", allow_all=False)} if planes is not None else None
    chosen = int_list(layers, "--layers", "0,1,2")
    check_paths(out, writes="band_ablation.csv, heads.csv, report.html, state/", model=model)
    check_before_load(model, device=device, dtype=dtype, engine=engine, executor=executor, corpus=corpus, prompts=prompts, tokens=tokens,
                      repeats=repeats, layers=chosen)
    try:
        from interp.rope.variants import parse_variant

        parsed = tuple(parse_variant(v) for v in variant)
    except ValueError as err:
        fail(err)
    settings = {"model": model, "corpus": corpus, "prompts": prompts, "tokens": tokens, "seed": seed, "repeats": repeats,
                "measure": sorted(measure), "n_remove": n_remove, "planes": planes, "variant": list(variant),
                "all_heads": all_heads, "causal": causal, "layers": layers, "block_size": block_size, "device": device,
                "dtype": dtype, "engine": engine}
    run = open_run(out, "ablate", settings, resume, force)
    stopped: Interrupted | None = None
    causal_cut, causal_done = False, 0

    from interp import corpus as corpus_mod
    from interp.experiments.ablation import band_ablation_table, band_variants, causal_ablation, ratio_summary
    from interp.engine.executor import ModelSpec, workers_for
    from interp.models import load_model
    from interp.report.bundle import write_csv, write_outputs
    from interp.engine import ScanConfig
    from interp.engine.config import switch_on

    try:
        with console.status(f"loading {model}"):
            m = load_model(model, device=device, dtype=dtype)
        variants = band_variants(m.card.n_rotary_planes, n_remove, extra) + parsed
        cfg = switch_on(ScanConfig(block_size=block_size, variants=variants, inp=True), measure)
        p = corpus_mod.prompts(m, corpus, prompts, tokens, seed, repeats=repeats)
        run.begin(model_identity(m.card), len(p))
        with workers_for(ModelSpec(model, str(m.device), dtype, engine), executor, workers, address) as actors:
            result, stopped = scan_units(run, m, p, range(len(p)), cfg, {"corpus": corpus, "seed": seed}, engine, "prompt",
                                         actors=actors)
        cause, t_causal = None, time.perf_counter()
        if causal and stopped is None:
            try:
                with interruptible():
                    cause = causal_ablation(m, p, variants, chosen, cfg, progress=True, baseline=result,
                                            store=run.units_dir, stop_on=(Interrupted,), engine=engine)
            except Interrupted as err:  # during the unmodified model's NLL
                stopped, causal_cut = err, True
            if cause is not None and cause.stopped is not None:
                stopped, causal_cut, causal_done, cause = cause.stopped, True, len(cause.summary), None
        t_causal = time.perf_counter() - t_causal
    except (InterpError, ValueError) as err:
        fail(err)
    if stopped is not None:
        if result is None:
            stop(stopped, 0, len(p), "prompts", out)
        if not causal_cut:
            result.meta["partial"] = f"{result.meta['prompts']} of {len(p)} prompts"
    heads = write_outputs(result, out, causal=cause.summary if cause is not None else None, tokenizer=m.tokenizer)
    table = band_ablation_table(result, heads, all_heads)
    write_csv(table, out / "band_ablation.csv")
    summary = ratio_summary(band_ablation_table(result, heads))
    write_csv(summary, out / "band_ablation_summary.csv")
    show_table(summary, f"Slash score at each SDH's lag, ablated / original ({int(heads['is_sdh'].sum())} SDHs)", list(summary.columns), 10)
    if cause is not None:
        write_csv(cause.summary, out / "causal_ablation.csv")
        write_csv(cause.heads, out / "causal_heads.csv")
        show_table(cause.summary, "Causal ablation: mean next-token NLL (nats)", list(cause.summary.columns), 10)
    causal_s = f", causal ablation {t_causal:.1f} s" if cause is not None else ""
    console.print(f"{escape(m.card.name)}: {plural(len(p), 'prompt')} x {tokens} tokens, scan with "
                  f"{plural(len(variants), 'counterfactual variant')} {result.meta['seconds']:.1f} s{causal_s}, "
                  f"total {time.perf_counter() - t_start:.1f} s wall; wrote {out}/band_ablation.csv and {out}/report.html", soft_wrap=True)
    if causal_cut:
        console.print(f"the causal ablation was cut off after {causal_done} of {plural(len(variants), 'band')} (the finished "
                      f"ones are kept): causal_ablation.csv and causal_heads.csv not written", soft_wrap=True)
        stop(stopped, len(p), len(p), "prompts", out)
    if stopped is not None:
        stop(stopped, result.meta["prompts"], len(p), "prompts", out)
    run.finish()
