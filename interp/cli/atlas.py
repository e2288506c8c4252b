"""``interp atlas``: the head atlas (text, repeated-random and optionally needle passes; every head's roles). Options
and outputs: ``interp atlas --help``."""

from __future__ import annotations

import time
from typing import Optional
from pathlib import Path

import typer
from rich.markup import escape

from interp.cli.common import (
    BLOCK_SIZE, DEVICE, DTYPE, ENGINE, MODEL, PROMPTS, SEED, TOKENS, app, check_before_load, check_paths, console, fail,
    float_list, int_list, show_table,
)
from interp.cli.longrun import (FORCE, RESUME, Interrupted, RunDir, interruptible, model_identity, open_run, scan_units,
                                 stop)
from interp.errors import ConfigError, InterpError


@app.command()
def atlas(
    model: str = MODEL,
    corpus: str = typer.Option("pydoc", help="text corpus of the text pass: pydoc | stdlib"),
    prompts: int = PROMPTS,
    tokens: int = TOKENS,
    seed: int = SEED,
    repeats: int = typer.Option(2, min=1, help="copies of r in the repeated-random pass (2: TransformerLens' induction test; RazorAttention: 4)"),
    out: Path = typer.Option(Path("out/atlas"), help="output folder (created; atlas.csv, atlas.html, heads.csv, report.html, state/ go in it)"),
    ablate: bool = typer.Option(False, "--ablate", help="also each role's score without the high / medium / low RoPE band (counterfactual, same pass)"),
    n_remove: int = typer.Option(6, min=1, help="planes left unrotated per band with --ablate (paper 004: 6)"),
    inp: bool = typer.Option(True, "--inp/--no-inp", help="per-plane InP in the text pass (role against band use; ~+50% time)"),
    retrieval: bool = typer.Option(False, "--retrieval", help="also the retrieval pass (needle-in-a-haystack decoding, Wu et al.)"),
    lengths: str = typer.Option("256,512,1024", help="retrieval pass: prompt lengths in tokens, comma-separated"),
    depths: str = typer.Option("0.1,0.3,0.5,0.7,0.9", help="retrieval pass: needle depths, fractions of the haystack"),
    block_size: int = BLOCK_SIZE,
    device: str = DEVICE,
    dtype: str = DTYPE,
    engine: str = ENGINE,
    support: int = typer.Option(0, min=0, help="bootstrap resamples of the prompts for each head's role support (support_<role> "
                                 "columns: the share of resamples in which the head holds the role); 0: off"),
    top: int = typer.Option(8, min=0, help="heads shown per role"),
    effects: Optional[str] = typer.Option(None, "--effects", help="also every head's causal effect (interp effects, exact) on "
                                          "the text pass's first prompts: comma-separated interventions, e.g. zero,streaming; "
                                          "joined to atlas.csv as dnll_<name> (+ _lo / _hi) and kl_<name>, shown on the grid's hover"),
    effects_prompts: int = typer.Option(2, min=1, help="--effects: the first N text prompts (the exact effects cost hundreds of scans)"),
    effects_tokens: int = typer.Option(256, min=2, help="--effects: each prompt cut to its first N tokens"),
    effects_from: Optional[Path] = typer.Option(None, "--effects-from", help="join an effects.csv already measured (interp "
                                                "effects) instead of running --effects"),
    resume: bool = RESUME,
    force: bool = FORCE,
) -> None:
    """Head atlas: what every head does (SDH, sink, previous-token, duplicate-token, induction, echo, streaming, retrieval).

    Runs a text pass and a repeated-random pass of the same size (and with --retrieval
    the needle-in-a-haystack pass) and labels every head: SDH, sink, previous-token, duplicate-token, induction, echo,
    streaming, retrieval. Writes atlas.csv (one row per head, every score, role flags; text-pass token scores
    prev_token_score, duplicate_token_score, induction_score; repeated-random rr_prev_token_score,
    rr_duplicate_token_score, rr_induction_score, rr_echo_score; with --support N, support_<role>: the share of N
    bootstrap resamples of the prompts in which the head holds the role), atlas_roles.csv, atlas_cooccurrence.csv,
    atlas_ablation.csv (--ablate), atlas.html, and the text pass's heads.csv, report.html and state/. With --effects (or
    --effects-from) atlas.csv also holds each head's causal effect (dnll_<intervention>, its interval, kl_<intervention>):
    where the head looks and what removing it costs, side by side on the grid's hover.

    Each finished unit goes into OUT/units as the run goes (a prompt of the text or repeated-random pass, a retrieval
    trial, an effects layer): --resume continues an interrupted run; Ctrl-C / SIGTERM write the text pass's finished
    prompts (heads.csv, report.html, state/, marked partial) and, once the text pass is whole and the repeated-random
    pass has a finished prompt, atlas.csv from the finished prompts (no retrieval, support or effects columns; the
    partial line says what it holds), then exit 130 / 143.
    """
    t_start = time.perf_counter()
    ret_cfg = None
    if retrieval:
        from interp.experiments.retrieval import RetrievalConfig

        try:
            ret_cfg = RetrievalConfig(lengths=tuple(int_list(lengths, "--lengths", "256,512,1024", allow_all=False) or []),
                                      depths=tuple(float_list(depths, "--depths", "0.1,0.5,0.9"))).check()
        except InterpError as err:
            fail(err)
    eff_cfg, eff_cols = _effects_options(effects, effects_prompts, effects_tokens, effects_from, prompts, tokens)
    check_paths(out, writes="atlas.csv, atlas.html, heads.csv, report.html, state/", model=model)
    check_before_load(model, device=device, dtype=dtype, engine=engine, corpus=corpus, atlas_passes=True, prompts=prompts, tokens=tokens,
                      repeats=repeats, lengths=ret_cfg.lengths if ret_cfg is not None else ())
    settings = {"model": model, "corpus": corpus, "prompts": prompts, "tokens": tokens, "seed": seed, "repeats": repeats,
                "ablate": ablate, "n_remove": n_remove, "inp": inp, "retrieval": retrieval,
                "lengths": list(ret_cfg.lengths) if ret_cfg is not None else None,
                "depths": list(ret_cfg.depths) if ret_cfg is not None else None, "block_size": block_size,
                "device": device, "dtype": dtype, "engine": engine, "support": support, "effects": effects,
                "effects_prompts": effects_prompts, "effects_tokens": effects_tokens}
    run = open_run(out, "atlas", settings, resume, force)

    from interp.engine import ScanConfig
    from interp.experiments.atlas import ROLES, AtlasConfig, run_atlas
    from interp.models import load_model
    from interp.report.atlas_page import write_atlas

    try:
        cfg = AtlasConfig(corpus=corpus, prompts=prompts, tokens=tokens, seed=seed, repeats=repeats, ablate=ablate,
                          n_remove=n_remove, inp=inp, scan=ScanConfig(block_size=block_size), retrieval=ret_cfg,
                          support=support, effects=eff_cfg, effects_prompts=effects_prompts, effects_tokens=effects_tokens)
        with console.status(f"loading {model}"):
            m = load_model(model, device=device, dtype=dtype)
        n_units = 2 * prompts + (len(ret_cfg.lengths) * len(ret_cfg.depths) * ret_cfg.needles if ret_cfg is not None else 0) \
            + (m.card.n_layers if eff_cfg is not None else 0)
        run.begin(model_identity(m.card), n_units)
        passes: dict = {}

        def scan_pass(name, prompts_, cfg_, meta):  # one unit per prompt; a stop ends the atlas after the last unit
            res_, stopped = scan_units(run, m, list(prompts_), range(len(prompts_)), cfg_, meta, engine, name)
            passes[name] = (res_, list(prompts_))
            if stopped is not None:
                raise stopped
            return res_

        try:
            with interruptible():
                res = run_atlas(m, cfg, progress=True, engine=engine, log=lambda s: console.print(escape(s), soft_wrap=True),
                                scan_pass=scan_pass, store=run.units_dir)
        except Interrupted as err:
            _partial_atlas(err, passes, run, out, m.tokenizer, n_units, cfg)
    except InterpError as err:
        fail(err)
    if eff_cols is not None:
        res.table = res.table.merge(eff_cols, on=["layer", "head"], how="left")
    write_atlas(res, out, m.tokenizer)
    t = res.table
    counts = ", ".join(f"{r.name} {int(t[f'role_{r.name}'].sum())}" for r in ROLES)
    for r in ROLES:
        on = t[t[f"role_{r.name}"]]
        if len(on):
            show_table(on.sort_values(r.column, ascending=False), f"{r.name} heads ({len(on)}), by {r.column}",
                  ["layer", "head", r.column, "roles"], top)
    secs = ", ".join(f"{k.replace('_', '-')} {v:.1f} s" for k, v in res.seconds.items())
    console.print(f"{escape(m.card.name)}: {len(t)} heads; roles: {counts}. Passes: {secs}; total "
                  f"{time.perf_counter() - t_start:.1f} s wall; wrote {out}/atlas.csv and {out}/atlas.html", soft_wrap=True)
    run.finish()


def _partial_atlas(err: Interrupted, passes: dict, run: RunDir, out: Path, tokenizer, n_units: int, cfg) -> None:
    """After a stop: the text pass's finished prompts written as a scan (``heads.csv``, ``report.html``, ``state/``),
    marked partial (``meta["partial"]``: the report's banner and ``state/scan.json``); once the text pass is whole
    and the repeated-random pass has finished prompts, ``atlas.csv`` too: ``atlas_table`` of the two scans, the shares
    of the prompts they hold (``interp.experiments.atlas.attainable`` / ``chance``), no retrieval, support or effects
    columns (their passes are not joined). Then the partial line and exit 130 / 143 (``stop``)."""
    from interp.experiments.atlas import atlas_table, attainable, chance, shares_of
    from interp.report.bundle import write_csv, write_outputs

    text, text_p = passes.get("text", (None, []))
    rr, rr_p = passes.get("rr", (None, []))
    if text is not None:
        whole = text.meta["prompts"] == len(text_p)
        rr_done = [rr_p[i] for i in rr.meta["prompt_ids"]] if whole and rr is not None else []
        text.meta["partial"] = f"atlas stopped: text pass {text.meta['prompts']} of {len(text_p)} prompts" + (
            "" if not whole else f"; repeated-random pass {len(rr_done)} of {cfg.prompts} prompts" + (
                "; no atlas.csv" if not rr_done else "; atlas.csv from these, without the later passes' columns"))
        write_outputs(text, out, tokenizer=tokenizer)
        wrote = f"{out}/heads.csv and {out}/report.html"
        if rr_done:
            shares = shares_of(attainable(text_p), attainable(rr_done), chance(text_p), chance(rr_done))
            write_csv(atlas_table(text, rr, shares), out / "atlas.csv")
            wrote = f"{out}/atlas.csv, " + wrote
        console.print(f"wrote the finished prompts to {wrote} (marked partial: {text.meta['partial']})", soft_wrap=True)
    stop(err, len(run.finished()), n_units, "units", out)


def _effects_options(effects: Optional[str], n_prompts: int, n_tokens: int, effects_from: Optional[Path], prompts: int,
                     tokens: int):
    """``(EffectsConfig or None, effect columns of --effects-from or None)``, checked before the model loads; a bad
    option is one line and exit 2."""
    if effects is None and effects_from is None:
        return None, None
    try:
        if effects is not None and effects_from is not None:
            raise ConfigError("--effects runs the effects and --effects-from joins measured ones: give one of them")
        if effects_from is not None:
            import pandas as pd

            from interp.experiments.atlas import effect_columns

            if not effects_from.is_file():
                raise ConfigError(f"--effects-from {effects_from}: no such file; give an effects.csv written by interp effects")
            return None, effect_columns(pd.read_csv(effects_from))
        from interp.experiments.effects import EffectsConfig, parse_interventions

        if not 1 <= n_prompts <= prompts:
            raise ConfigError(f"--effects-prompts must lie in 1..{prompts} (the text pass's prompts), got {n_prompts}")
        if not 2 <= n_tokens <= tokens:
            raise ConfigError(f"--effects-tokens must lie in 2..{tokens} (the text pass's tokens), got {n_tokens}")
        return EffectsConfig(interventions=parse_interventions(effects)).check(n_tokens=n_tokens), None
    except InterpError as err:
        fail(err)
