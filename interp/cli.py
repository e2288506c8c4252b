"""Command line: ``interp models | scan | atlas | ablate | sweep | view | merge | compare | report | verify | retrieval | effects``."""

from __future__ import annotations

import time
from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from interp.errors import InterpError

app = typer.Typer(help="Attention-geometry toolkit: find slash-dominant heads, sinks and low-rank q/k in open LMs, offline.",
                  no_args_is_help=True, pretty_exceptions_enable=False)
console = Console()


# options shared by the commands that scan a corpus
MODEL = typer.Argument("smollm2-135m", help="zoo name, ORG/NAME (Hugging Face hub id) or local:PATH")
DEVICE = typer.Option("auto", help="cpu | cuda | auto (cuda when available)")
DTYPE = typer.Option("float32", help="float32 | bfloat16 | float16 (the model's; scan sums stay float64)")
ENGINE = typer.Option("auto", help="attention engine: auto (Triton on a GPU, the fused C++ kernel on CPU float32, else "
                      "Python) | triton | cpu-kernel | python; results agree to float rounding")
DEVICE_MAP = typer.Option(None, "--device-map", help="auto: place the layers over the GPUs and the CPU (accelerate), "
                          "for models larger than one GPU; overrides --device")
EXECUTOR = typer.Option("local", help="local (this process) | ray (workers on a local or existing Ray cluster)")
WORKERS = typer.Option(2, help="Ray workers (each loads the model once); ignored by --executor local")
ADDRESS = typer.Option(None, help="an existing Ray cluster to join (auto, ray://host:10001); default: start a local one")
CORPUS = typer.Option("pydoc", help="pydoc | stdlib | random | repeated-random (BOS, r, r: induction heads' input)")
REPEATS = typer.Option(2, help="copies of the random sequence in --corpus repeated-random (RazorAttention uses 4)")
MEASURE = typer.Option([], "--measure", help="switch on an optional measure (repeatable): inp, geometry, token_match, echo, massive, shape, "
                       "heavy_hitters; "
                       "--measure list prints every registered measure and exits")
PROMPTS = typer.Option(8, help="number of prompts")
TOKENS = typer.Option(1024, help="tokens per prompt")
SEED = typer.Option(0, help="prompt selection seed")


def _fail(err: Exception) -> None:
    console.print(f"[bold red]error:[/] {escape(str(err))}", soft_wrap=True)  # one line; escaped: '.[gemma]' is not rich markup
    raise typer.Exit(2)


def _plural(n: int, word: str) -> str:
    """``"1 prompt"``, ``"8 prompts"``."""
    return f"{n} {word}{'' if n == 1 else 's'}"


_FILE_SUFFIXES = (".html", ".htm", ".csv", ".json", ".pt")


def _measure_list(measure: List[str]) -> None:
    """``--measure list``: print the registry (name, how it is switched on, columns, options) and exit 0; other names
    are checked here, before any model loads (one line, exit 2, for an unknown one)."""
    from interp.engine.config import ScanConfig, measure_rows, switch_on

    if "list" not in measure:
        try:
            switch_on(ScanConfig(), measure)
        except InterpError as err:
            _fail(err)
        return

    table = Table(title="measures (interp.measures.REGISTRY, in heads.csv column order)")
    for col in ("measure", "on", "columns", "options", "summary"):
        table.add_column(col, overflow="fold")
    for r in measure_rows():
        table.add_row(*(escape(str(r[c])) for c in ("measure", "on", "columns", "options", "summary")))
    console.print(table)
    raise typer.Exit(0)


def _check_paths(out_dir: Optional[Path] = None, out_file: Optional[Path] = None, *, writes: str = "",
                 files: Optional[dict[str, Optional[Path]]] = None, scans: Optional[List[Path]] = None, scan_hint: str = "",
                 model: Optional[str] = None) -> None:
    """Check every path a command reads or writes, before it loads a model; a bad one: one line naming it and the fix, exit 2.

    ``out_dir``: the ``--out`` folder (``writes`` says what goes in it; a name ending in .html, .csv... is refused
    as a likely file name); ``out_file``: the ``--out`` file; ``files``: ``{option: path}`` input files; ``scans``:
    output folders of interp scan / merge to read (each needs ``state/``); ``model``: a ``local:PATH`` must be a folder.
    Nothing is created here (``interp.io``).
    """
    from interp import io

    try:
        if model is not None and model.startswith("local:"):
            io.check_input_dir(model[len("local:"):], "model local:")
        for option, path in (files or {}).items():
            if path is not None:
                io.check_input_file(path, option)
        for d in scans or []:
            io.check_input_dir(d, "scan folder", ("state",), scan_hint)
        if out_dir is not None:
            if out_dir.suffix.lower() in _FILE_SUFFIXES and not out_dir.is_dir():
                raise InterpError(f"--out {out_dir} looks like a file name, but --out names a folder here ({writes}); "
                                  f"give a folder name such as {out_dir.with_suffix('')}")
            io.check_output_dir(out_dir)
        if out_file is not None:
            io.check_output_file(out_file)
    except InterpError as err:
        _fail(err)


def _show(df, title: str, cols: list[str], n: int) -> None:
    table = Table(title=title)
    cols = [c for c in cols if c in df]
    for c in cols:
        table.add_column(c, justify="right")
    for row in df[cols].head(n).itertuples(index=False):
        table.add_row(*[f"{v:.4g}" if isinstance(v, float) else str(v) for v in row])
    console.print(table)


def _top_sdh(heads, n: int) -> None:
    sdh = heads[heads["is_sdh"]].sort_values("slash_score", ascending=False)
    _show(sdh, f"Top slash-dominant heads ({len(sdh)} of {len(heads)} heads have score >= kappa at a lag 0..4)",
          ["layer", "head", "slash_delta", "slash_score", "r1_q", "r1_k", "sink_weight", "ood_ratio"], n)


def _long_summary(heads, cfg) -> None:
    if heads["long_any_slash_score"].isna().all():
        return
    n = int(heads["is_sdh_long"].sum())
    rep = int(((heads["long_any_slash_score"] >= cfg.kappa_long) & (heads["long_any_prompt_frac"] < cfg.long_min_frac - 1e-12)).sum())
    console.print(f"long range: {n} heads have a lag that holds in >= {cfg.long_min_frac:.0%} of prompts (is_sdh_long); "
                  f"{rep} heads' best long lag holds in fewer (content repeats, see content_repeats.csv)")


@app.command()
def models() -> None:
    """List the model zoo, whether each model is installed, and how to install it."""
    from interp.models import zoo_table

    rows = zoo_table()
    table = Table(title="interp model zoo (offline)")
    table.add_column("name", no_wrap=True, min_width=max(len(r["name"]) for r in rows))
    table.add_column("installed", no_wrap=True)
    table.add_column("description", overflow="fold")
    for r in rows:
        table.add_row(escape(r["name"]), r["installed"], escape(r["description"]))
    console.print(table)
    missing = [r for r in rows if r["install"]]
    if missing:  # whole lines, never cut or wrapped by the table, and not read as markup ('.[gemma]')
        console.print("To install a missing model, run in the interp checkout:")
        for r in missing:
            console.print(f"  {r['name']}: {r['install']}", markup=False, highlight=False, soft_wrap=True)


def _check_engine(engine: str, device: str) -> None:
    """One line and exit 2 for an engine that cannot run on ``device`` (before any model loads)."""
    from interp.engine.collector import check_engine

    try:
        check_engine(engine, device)
    except InterpError as err:
        _fail(err)


def _shard(spec: Optional[str]) -> tuple[int, int]:
    if spec is None:
        return 0, 1
    try:
        i, n = (int(x) for x in spec.split("/"))
        assert 0 <= i < n
    except (ValueError, AssertionError):
        _fail(InterpError(f"--shard takes I/N with 0 <= I < N (e.g. 0/4), got {spec!r}"))
    return i, n


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
    block_size: int = typer.Option(32, help="queries per attention block"),
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
    top: int = typer.Option(15, help="rows of the SDH table to print"),
) -> None:
    """Scan a model on a corpus; write heads.csv, long_slash.csv, report.html and raw state into OUT."""
    _measure_list(measure)
    t_start = time.perf_counter()
    i, n = _shard(shard)
    _check_paths(out, writes="heads.csv, report.html, state/" if n == 1 else "state/", model=model)
    _check_engine(engine, device)

    from interp import corpus as corpus_mod
    from interp.engine.executor import ModelSpec, run_sharded
    from interp.models import load_model
    from interp.report.bundle import write_outputs
    from interp.engine import ScanConfig, scan as engine_scan
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
        if executor == "local":
            result = engine_scan(m, p, cfg, progress=True, meta=meta, prompt_ids=ids, engine=engine)
        else:
            if n > 1:
                raise InterpError("--shard and --executor ray both split the prompts; use one of them")
            result = run_sharded(ModelSpec(model, str(m.device), dtype, engine), p, cfg, executor=executor, workers=workers,
                                 address=address, meta={"corpus": corpus, "seed": seed})
        ood_result = None
        if ood:
            r = corpus_mod.prompts(m, "random", prompts, tokens, seed)[i::n]
            ood_result = engine_scan(m, r, cfg, progress=True, meta={**meta, "corpus": "random"}, prompt_ids=ids, engine=engine)
    except InterpError as err:
        _fail(err)
    if n > 1:
        result.save(out / "state")
        if ood_result is not None:
            ood_result.save(out / "ood")
        console.print(f"shard {i}/{n}: {_plural(len(p), 'prompt')} x {tokens} tokens, scan {result.meta['seconds']:.1f} s, "
                      f"total {time.perf_counter() - t_start:.1f} s wall; raw state in {out}/state. "
                      f"Combine with: interp merge DIR... --out OUT", soft_wrap=True)
        return
    heads = write_outputs(result, out, ood_result, tokenizer=m.tokenizer)
    _top_sdh(heads, top)
    _long_summary(heads, cfg)
    console.print(f"{escape(m.card.name)}: {_plural(len(p), 'prompt')} x {tokens} tokens, scan {result.meta['seconds']:.1f} s, "
                  f"total {time.perf_counter() - t_start:.1f} s wall (model load and report included); "
                  f"wrote {out}/heads.csv and {out}/report.html", soft_wrap=True)


@app.command()
def atlas(
    model: str = MODEL,
    corpus: str = typer.Option("pydoc", help="text corpus of the text pass: pydoc | stdlib"),
    prompts: int = PROMPTS,
    tokens: int = TOKENS,
    seed: int = SEED,
    repeats: int = typer.Option(2, help="copies of r in the repeated-random pass (2: TransformerLens' induction test; RazorAttention: 4)"),
    out: Path = typer.Option(Path("out/atlas"), help="output folder (created; atlas.csv, atlas.html, heads.csv, report.html, state/ go in it)"),
    ablate: bool = typer.Option(False, "--ablate", help="also each role's score without the high / medium / low RoPE band (counterfactual, same pass)"),
    n_remove: int = typer.Option(6, help="planes left unrotated per band with --ablate (paper 004: 6)"),
    inp: bool = typer.Option(True, "--inp/--no-inp", help="per-plane InP in the text pass (role against band use; ~+50%% time)"),
    retrieval: bool = typer.Option(False, "--retrieval", help="also the retrieval pass (needle-in-a-haystack decoding, Wu et al.)"),
    lengths: str = typer.Option("256,512,1024", help="retrieval pass: prompt lengths in tokens, comma-separated"),
    depths: str = typer.Option("0.1,0.3,0.5,0.7,0.9", help="retrieval pass: needle depths, fractions of the haystack"),
    block_size: int = typer.Option(32, help="queries per attention block"),
    device: str = DEVICE,
    dtype: str = DTYPE,
    engine: str = ENGINE,
    support: int = typer.Option(0, help="bootstrap resamples of the prompts for each head's role support (support_<role> "
                                 "columns: the share of resamples in which the head holds the role); 0: off"),
    top: int = typer.Option(8, help="heads shown per role"),
) -> None:
    """Head atlas: what every head does. Runs a text pass and a repeated-random pass of the same size (and with --retrieval
    the needle-in-a-haystack pass) and labels every head: SDH, sink, previous-token, duplicate-token, induction, echo,
    streaming, retrieval. Writes atlas.csv (one row per head, every score, role flags; text-pass token scores
    prev_token_score, duplicate_token_score, induction_score; repeated-random rr_prev_token_score,
    rr_duplicate_token_score, rr_induction_score, rr_echo_score; with --support N, support_<role>: the share of N
    bootstrap resamples of the prompts in which the head holds the role), atlas_roles.csv, atlas_cooccurrence.csv,
    atlas_ablation.csv (--ablate), atlas.html, and the text pass's heads.csv, report.html and state/.
    """
    t_start = time.perf_counter()
    from interp.experiments.atlas import check_text_corpus

    try:
        check_text_corpus(corpus)
    except InterpError as err:
        _fail(err)
    ret_cfg = None
    if retrieval:
        from interp.experiments.retrieval import RetrievalConfig

        try:
            ret_cfg = RetrievalConfig(lengths=tuple(_int_list(lengths, "--lengths", "256,512,1024", allow_all=False) or []),
                                      depths=tuple(_float_list(depths, "--depths", "0.1,0.5,0.9"))).check()
        except InterpError as err:
            _fail(err)
    _check_paths(out, writes="atlas.csv, atlas.html, heads.csv, report.html, state/", model=model)
    _check_engine(engine, device)

    from interp.engine import ScanConfig
    from interp.experiments.atlas import ROLES, AtlasConfig, run_atlas
    from interp.models import load_model
    from interp.report.atlas_page import write_atlas

    try:
        cfg = AtlasConfig(corpus=corpus, prompts=prompts, tokens=tokens, seed=seed, repeats=repeats, ablate=ablate,
                          n_remove=n_remove, inp=inp, scan=ScanConfig(block_size=block_size), retrieval=ret_cfg,
                          support=support)
        with console.status(f"loading {model}"):
            m = load_model(model, device=device, dtype=dtype)
        res = run_atlas(m, cfg, progress=True, engine=engine, log=lambda s: console.print(escape(s), soft_wrap=True))
    except InterpError as err:
        _fail(err)
    write_atlas(res, out, m.tokenizer)
    t = res.table
    counts = ", ".join(f"{r.name} {int(t[f'role_{r.name}'].sum())}" for r in ROLES)
    for r in ROLES:
        on = t[t[f"role_{r.name}"]]
        if len(on):
            _show(on.sort_values(r.column, ascending=False), f"{r.name} heads ({len(on)}), by {r.column}",
                  ["layer", "head", r.column, "roles"], top)
    secs = ", ".join(f"{k.replace('_', '-')} {v:.1f} s" for k, v in res.seconds.items())
    console.print(f"{escape(m.card.name)}: {len(t)} heads; roles: {counts}. Passes: {secs}; total "
                  f"{time.perf_counter() - t_start:.1f} s wall; wrote {out}/atlas.csv and {out}/atlas.html", soft_wrap=True)


def _int_list(spec: Optional[str], what: str, example: str = "0,4,8", allow_all: bool = True) -> Optional[list[int]]:
    """Comma-separated integers (``None`` for ``None`` or, with ``allow_all``, ``"all"``); else one line, exit 2."""
    if spec is None or (allow_all and spec == "all"):
        return None
    try:
        return [int(x) for x in spec.split(",") if x.strip()]
    except ValueError:
        _fail(InterpError(f"{what} takes comma-separated integers (e.g. {example})" + (" or 'all'" if allow_all else "")
                          + f", got {spec!r}"))


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
    n_remove: int = typer.Option(6, help="planes left unrotated per band (paper 004: 6)"),
    planes: Optional[str] = typer.Option(None, help="also ablate this set of planes, e.g. 0,1,2 (named 'custom')"),
    variant: List[str] = typer.Option([], help="also any RoPE variant: partial:F, p-rope:F, rope-id, pi:X, yarn:X, scaled:X, shuffled:SEED (repeatable)"),
    all_heads: bool = typer.Option(False, "--all-heads", help="band_ablation.csv for every head, not only the SDHs"),
    causal: bool = typer.Option(False, "--causal", help="also run the model itself with each band unrotated (NLL, downstream changes)"),
    layers: Optional[str] = typer.Option(None, help="layers of the causal ablation, e.g. 0,1,2 (default all)"),
    block_size: int = typer.Option(32, help="queries per attention block"),
    device: str = DEVICE,
    dtype: str = DTYPE,
    engine: str = ENGINE,
    executor: str = EXECUTOR,
    workers: int = WORKERS,
    address: Optional[str] = ADDRESS,
) -> None:
    """Frequency band ablation (paper 004 Table 5, Fig. 8): slash scores with high / medium / low planes unrotated.

    Writes band_ablation.csv (layer, head, delta, original, wo_high, wo_medium, wo_low, ratios), the scan's
    outputs (heads.csv, report.html with a frequencies section, state/), and with --causal causal_ablation.csv
    (band, layers, nll_original, nll, delta_nll) and causal_heads.csv (per-head slash and sink changes).
    """
    _measure_list(measure)
    t_start = time.perf_counter()
    extra = {"custom": _int_list(planes, "--planes", "0,1,2", allow_all=False)} if planes else None
    chosen = _int_list(layers, "--layers", "0,1,2")
    _check_paths(out, writes="band_ablation.csv, heads.csv, report.html, state/", model=model)
    _check_engine(engine, device)

    from interp import corpus as corpus_mod
    from interp.experiments.ablation import band_ablation_table, band_variants, causal_ablation, ratio_summary
    from interp.engine.executor import ModelSpec, run_sharded
    from interp.rope.variants import parse_variant
    from interp.models import load_model
    from interp.report.bundle import write_csv, write_outputs
    from interp.engine import ScanConfig
    from interp.engine.config import switch_on

    try:
        with console.status(f"loading {model}"):
            m = load_model(model, device=device, dtype=dtype)
        variants = band_variants(m.card.n_rotary_planes, n_remove, extra) + tuple(parse_variant(v) for v in variant)
        cfg = switch_on(ScanConfig(block_size=block_size, variants=variants, inp=True), measure)
        p = corpus_mod.prompts(m, corpus, prompts, tokens, seed, repeats=repeats)
        result = run_sharded(ModelSpec(model, str(m.device), dtype, engine), p, cfg, executor=executor, workers=workers, address=address,
                             model=m, progress=True, meta={"corpus": corpus, "seed": seed})
        cause, t_causal = None, time.perf_counter()
        if causal:
            cause = causal_ablation(m, p, variants, chosen, cfg, progress=True, baseline=result)
        t_causal = time.perf_counter() - t_causal
    except (InterpError, ValueError) as err:
        _fail(err)
    heads = write_outputs(result, out, causal=cause.summary if cause is not None else None, tokenizer=m.tokenizer)
    table = band_ablation_table(result, heads, all_heads)
    write_csv(table, out / "band_ablation.csv")
    summary = ratio_summary(band_ablation_table(result, heads))
    write_csv(summary, out / "band_ablation_summary.csv")
    _show(summary, f"Slash score at each SDH's lag, ablated / original ({int(heads['is_sdh'].sum())} SDHs)", list(summary.columns), 10)
    if cause is not None:
        write_csv(cause.summary, out / "causal_ablation.csv")
        write_csv(cause.heads, out / "causal_heads.csv")
        _show(cause.summary, "Causal ablation: mean next-token NLL (nats)", list(cause.summary.columns), 10)
    causal_s = f", causal ablation {t_causal:.1f} s" if cause is not None else ""
    console.print(f"{escape(m.card.name)}: {_plural(len(p), 'prompt')} x {tokens} tokens, scan with "
                  f"{_plural(len(variants), 'counterfactual variant')} {result.meta['seconds']:.1f} s{causal_s}, "
                  f"total {time.perf_counter() - t_start:.1f} s wall; wrote {out}/band_ablation.csv and {out}/report.html", soft_wrap=True)


@app.command()
def sweep(
    model: str = MODEL,
    lengths: str = typer.Option("512,1024,2048", help="prefix lengths, comma-separated"),
    corpus: str = CORPUS,
    prompts: int = typer.Option(2, help="number of prompts"),
    seed: int = SEED,
    repeats: int = REPEATS,
    measure: List[str] = MEASURE,
    out: Path = typer.Option(Path("out/sweep"), help="output folder (created; sweep.csv, sweep.html, length_N/ go in it)"),
    beyond_context: bool = typer.Option(False, "--beyond-context", help="allow lengths beyond the model's context (out of distribution)"),
    cluster_points: int = typer.Option(400, help="points per head and prompt for silhouette / Davies-Bouldin and max q.k "
                                        "(half queries, half keys, seeded positions)"),
    block_size: int = typer.Option(32, help="queries per attention block"),
    device: str = DEVICE,
    dtype: str = DTYPE,
    executor: str = EXECUTOR,
    workers: int = WORKERS,
    address: Optional[str] = ADDRESS,
) -> None:
    """Scan the same prompts' prefixes at several lengths; write sweep.csv, sweep.html and one state folder per length.

    Every column of heads.csv plus the geometry of paper 001 (silhouette / Davies-Bouldin of the q and k clusters,
    key norms, attention received by token 0, maximum q.k per query), per length, layer and head.
    """
    _measure_list(measure)
    t_start = time.perf_counter()
    ns = _int_list(lengths, "--lengths", "512,1024,2048", allow_all=False) or []
    _check_paths(out, writes="sweep.csv, sweep.html, length_N/", model=model)

    from interp import corpus as corpus_mod
    from interp.models import load_model
    from interp.engine.executor import ModelSpec
    from interp.report.sweep_page import write_sweep_report
    from interp.engine import ScanConfig
    from interp.engine.config import switch_on
    from interp.experiments.sweep import check_lengths, sweep as run_sweep

    try:
        with console.status(f"loading {model}"):
            m = load_model(model, device=device, dtype=dtype)
        ns = check_lengths(ns, max(ns or [0]), m.card.context_length, beyond_context)
        if ns[-1] > m.card.context_length:
            console.print(f"[yellow]warning:[/] lengths above {m.card.context_length} ({', '.join(str(n) for n in ns if n > m.card.context_length)}) "
                          f"are beyond {escape(m.card.name)}'s context: positions out of distribution", soft_wrap=True)
        p = corpus_mod.prompts(m, corpus, prompts, ns[-1], seed, beyond_context=beyond_context, repeats=repeats)
        cfg = switch_on(ScanConfig(block_size=block_size, geometry=True, cluster_points=cluster_points, counterfactual_queries=0), measure)
        result = run_sweep(m, p, ns, cfg, beyond_context=beyond_context, progress=True, meta={"corpus": corpus, "seed": seed},
                           executor=executor, workers=workers, address=address, spec=ModelSpec(model, str(m.device), dtype))
    except InterpError as err:
        _fail(err)
    t_write = time.perf_counter()
    with console.status(f"writing {out}"):
        result.save(out)
        write_sweep_report(result, out / "sweep.html")
    t_write = time.perf_counter() - t_write
    table = result.table
    summary = table.groupby("length")[["sink_weight", "max_qk_rot", "srank_k_rot", "silhouette_rot", "cos_qk_rot"]].median().reset_index()
    _show(summary, "Median over heads by length", list(summary.columns), len(summary))
    scans = sum(t["scan"] for t in result.seconds.values())
    fin = sum(t["finalise"] for t in result.seconds.values())
    console.print(f"{escape(m.card.name)}: {_plural(len(p), 'prompt')} at {_plural(len(ns), 'length')}, scans {scans:.1f} s, "
                  f"finalising {fin:.1f} s, writing {t_write:.1f} s, total {time.perf_counter() - t_start:.1f} s wall; "
                  f"wrote {out}/sweep.csv and {out}/sweep.html", soft_wrap=True)


@app.command()
def view(
    model: str = MODEL,
    text: Optional[str] = typer.Option(None, help="the prompt"),
    file: Optional[Path] = typer.Option(None, help="read the prompt from this file (UTF-8 text)"),
    out: Path = typer.Option(Path("view.html"), help="the HTML file to write (a file, not a folder)"),
    layers: Optional[str] = typer.Option(None, help="layers to include, e.g. 0,3-5 (default all)"),
    heads: Optional[str] = typer.Option(None, help="heads to include, e.g. 2 or 0-3 (default all)"),
    window: int = typer.Option(512, help="tokens shown: queries and keys in [start, start + window)"),
    start: int = typer.Option(0, help="first token of the window"),
    device: str = DEVICE,
    dtype: str = DTYPE,
) -> None:
    """Token-level attention viewer: one offline HTML page (hover a token: where it looks, what looks at it)."""
    _check_paths(out_file=out, files={"--file": file}, model=model)

    from interp.report.viewer import view_command_main

    try:
        path = view_command_main(model, text, file, out, layers, heads, window, start, device=device, dtype=dtype)
    except InterpError as err:
        _fail(err)
    console.print(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB); open it in a browser, it works offline")


def _distinct_prompts(dirs: List[Path], results) -> None:
    """Refuse folders that hold the same prompt (a shard given twice would be counted twice), naming both folders."""
    seen: dict[int, int] = {}
    for k, r in enumerate(results):
        for pid in r.meta.get("prompt_ids", []):
            if pid in seen:
                j = seen[pid]
                raise InterpError(f"prompt {pid} is in both {dirs[j]} (shard {results[j].meta.get('shard', '?')}) and {dirs[k]} "
                                  f"(shard {r.meta.get('shard', '?')}): merging would count it twice; give each shard's folder once")
            seen[pid] = k


@app.command()
def merge(dirs: List[Path] = typer.Argument(..., help="shard folders written by scan --shard"),
          out: Path = typer.Option(Path("out/merged"), help="output folder (created; heads.csv, report.html, state/ go in it)")) -> None:
    """Combine shards (sums add exactly) and write the finalised tables and report."""
    _check_paths(out, writes="heads.csv, report.html, state/", scans=dirs,
                 scan_hint="write shards with interp scan MODEL --shard I/N --out DIR")

    from interp.report.bundle import write_outputs
    from interp.engine import ScanResult, merge_results

    try:
        shards = [ScanResult.load(d / "state") for d in dirs]
        _distinct_prompts(dirs, shards)
        result = merge_results(shards)
        oods = [d / "ood" for d in dirs if (d / "ood").exists()]
        ood = merge_results([ScanResult.load(d) for d in oods]) if len(oods) == len(dirs) else None
    except (FileNotFoundError, ValueError, InterpError) as err:
        _fail(err)
    heads = write_outputs(result, out, ood)
    _top_sdh(heads, 15)
    _long_summary(heads, result.config)
    console.print(f"merged {_plural(len(dirs), 'shard')} ({_plural(result.meta['prompts'], 'prompt')}) into {out}")


def _folder_names(dirs: List[Path]) -> list[str]:
    """Distinct names for folders: the last path component, with parents where two folders share it
    (``a/scan``, ``b/scan``), and `` (2)`` for a folder given twice."""
    paths = [Path(d).resolve() for d in dirs]
    names = []
    for p in paths:
        k = 1
        while k < len(p.parts) and any(q != p and q.parts[-k:] == p.parts[-k:] for q in paths):
            k += 1
        names.append("/".join(p.parts[-k:]))
    out: list[str] = []
    for n in names:
        out.append(n if n not in out else f"{n} ({names[: len(out) + 1].count(n)})")
    return out


@app.command()
def compare(dirs: List[Path] = typer.Argument(..., help="output folders of interp scan / merge (each with state/)"),
            out: Path = typer.Option(Path("out/compare"), help="output folder (created; compare.csv and compare.html go in it)"),
            names: Optional[str] = typer.Option(None, help="comma-separated names for the scans, one per folder "
                                                "(default: the folders' names, with parent folders where two are equal)")) -> None:
    """Put several scans side by side: compare.csv (one row per scan, layer, head) and compare.html."""
    _check_paths(out, writes="compare.csv, compare.html", scans=dirs, scan_hint="write one with interp scan MODEL --out DIR")
    labels = _folder_names(dirs) if names is None else [n.strip() for n in names.split(",")]
    if len(labels) != len(dirs) or len(set(labels)) != len(labels) or not all(labels):
        _fail(InterpError(f"--names needs {len(dirs)} distinct non-empty names, one per folder (e.g. --names "
                          f"{','.join(f'scan{k + 1}' for k in range(len(dirs)))}), got {names!r}"))

    from interp.report.compare import summary, write_compare
    from interp.engine import ScanResult

    try:
        results = [ScanResult.load(d / "state") for d in dirs]
        table = write_compare(results, out, labels)
    except (FileNotFoundError, ValueError, InterpError) as err:
        _fail(err)
    s = summary(table)
    _show(s, "Scans compared", ["model", "heads", "sdh", "sink_rate", "median_r1_q", "median_r1_k", "median_cos_qk_pre"], len(s))
    console.print(f"compared {_plural(len(dirs), 'scan')} ({escape(', '.join(labels))}); wrote {out}/compare.csv and {out}/compare.html",
                  soft_wrap=True)


@app.command()
def report(folder: Path = typer.Argument(..., help="an output folder of scan or merge")) -> None:
    """Re-render heads.csv and report.html of a scan folder from its raw state."""
    _check_paths(folder, writes="heads.csv, report.html", scans=[folder], scan_hint="write one with interp scan MODEL --out DIR")

    from interp.report.bundle import write_outputs
    from interp.engine import ScanResult

    try:
        result = ScanResult.load(folder / "state")
        ood = ScanResult.load(folder / "ood") if (folder / "ood").exists() else None
    except (FileNotFoundError, InterpError) as err:
        _fail(err)
    write_outputs(result, folder, ood)
    console.print(f"wrote {folder}/report.html")


@app.command()
def verify(model: str = MODEL, tokens: int = typer.Option(256, help="prompt length"),
           atol: float = typer.Option(1e-4), device: str = typer.Option("cpu", help="cpu | cuda | auto"), dtype: str = DTYPE) -> None:
    """Check that recomputed attention equals the model's eager attention on a pydoc prompt."""
    _check_paths(model=model)

    from interp import corpus as corpus_mod
    from interp.hooks.capture import verify_attention
    from interp.models import load_model

    try:
        m = load_model(model, device=device, dtype=dtype)
        df = verify_attention(m, corpus_mod.prompts(m, "pydoc", 1, tokens)[0], atol=atol)
    except InterpError as err:
        _fail(err)
    _show(df, f"verify_attention on {m.card.name}, {tokens} tokens", list(df.columns), len(df))
    worst = df["max_abs_diff"].max()
    console.print(("[green]OK" if df.attrs["ok"] else "[red]FAILED") + f"[/]: max |recomputed - eager| = {worst:.3g} (atol {atol:g})")
    if not df.attrs["ok"]:
        raise typer.Exit(1)


def _float_list(spec: str, what: str, example: str) -> list[float]:
    """Comma-separated numbers; else one line, exit 2."""
    try:
        return [float(x) for x in spec.split(",") if x.strip()]
    except ValueError:
        _fail(InterpError(f"{what} takes comma-separated numbers (e.g. {example}), got {spec!r}"))


@app.command()
def retrieval(
    model: str = MODEL,
    lengths: str = typer.Option("256,512,1024", help="prompt lengths in tokens (BOS, haystack, needle and question), comma-separated"),
    depths: str = typer.Option("0.1,0.3,0.5,0.7,0.9", help="needle depths, fractions of the haystack, comma-separated"),
    needles: int = typer.Option(1, help="random needles per (length, depth)"),
    seed: int = typer.Option(0, help="needle and haystack seed"),
    max_new_tokens: int = typer.Option(50, help="greedy decode budget (Wu et al.: 50)"),
    top_k: int = typer.Option(1, help="attended positions checked per head and step (Wu et al.: 1)"),
    gate: float = typer.Option(0.5, help="ROUGE-1 recall a trial needs to count in retrieval_score (Wu et al.: 0.5)"),
    template: str = typer.Option("auto", help="auto | plain | chat: the prompt around the haystack (auto: chat where the tokenizer has one)"),
    out: Path = typer.Option(Path("out/retrieval"), help="output folder (created; retrieval.csv, retrieval_summary.csv, retrieval_trials.csv go in it)"),
    top: int = typer.Option(10, help="heads shown"),
    device: str = DEVICE,
    dtype: str = DTYPE,
) -> None:
    """Retrieval heads (Wu et al. 2024): needle-in-a-haystack on pydoc text, greedy decode, each head's top-1 attention.

    A head's retrieval score is the share of needle tokens it copies (top-1 attention on the needle position whose
    token the model generates), averaged over the trials the model itself answers (ROUGE-1 recall > --gate).
    Writes retrieval.csv (layer, head, kv_head, retrieval_score, retrieval_score_all, hits, hits_all,
    trials_retrieved, trials), retrieval_summary.csv (copy accuracy per length and depth) and retrieval_trials.csv
    (every prompt: needle position, answer, response, ROUGE-1 recall).
    """
    t_start = time.perf_counter()
    from interp.experiments.retrieval import RetrievalConfig, run_retrieval

    try:
        cfg = RetrievalConfig(lengths=tuple(_int_list(lengths, "--lengths", "256,512,1024", allow_all=False) or []),
                              depths=tuple(_float_list(depths, "--depths", "0.1,0.5,0.9")), needles=needles, seed=seed,
                              max_new_tokens=max_new_tokens, top_k=top_k, gate=gate, template=template).check()
    except InterpError as err:
        _fail(err)
    _check_paths(out, writes="retrieval.csv, retrieval_summary.csv, retrieval_trials.csv", model=model)

    from interp.models import load_model
    from interp.report.bundle import write_csv

    try:
        with console.status(f"loading {model}"):
            m = load_model(model, device=device, dtype=dtype)
        result = run_retrieval(m, cfg, progress=True, log=lambda s: console.print(escape(s), soft_wrap=True))
    except InterpError as err:
        _fail(err)
    out.mkdir(parents=True, exist_ok=True)
    write_csv(result.heads, out / "retrieval.csv")
    summary = result.summary
    write_csv(summary, out / "retrieval_summary.csv")
    write_csv(result.trials, out / "retrieval_trials.csv")
    _show(summary, "Copy accuracy: mean ROUGE-1 recall of the answer, share of trials retrieved", list(summary.columns), len(summary))
    n_ok, n = int(result.trials["retrieved"].sum()), len(result.trials)
    key = "retrieval_score" if n_ok else "retrieval_score_all"
    heads = result.heads.sort_values(key, ascending=False)
    _show(heads, f"Top heads by {key} ({n_ok} of {_plural(n, 'trial')} retrieved)",
          ["layer", "head", "kv_head", "retrieval_score", "retrieval_score_all", "hits", "hits_all"], top)
    if not n_ok:
        console.print(f"[yellow]warning:[/] {escape(m.card.name)} answered none of the {n} prompts (ROUGE-1 recall > {gate:g}): "
                      "retrieval_score is empty; retrieval_score_all scores every trial", soft_wrap=True)
    console.print(f"{escape(m.card.name)}: {_plural(n, 'trial')}, {n_ok} retrieved; {result.seconds:.1f} s decoding, "
                  f"total {time.perf_counter() - t_start:.1f} s wall; wrote {out}/retrieval.csv", soft_wrap=True)


@app.command()
def effects(
    model: str = MODEL,
    corpus: str = typer.Option("pydoc", help="pydoc | stdlib | random | repeated-random"),
    prompts: int = PROMPTS,
    tokens: int = typer.Option(256, help="tokens per prompt"),
    seed: int = SEED,
    interventions: Optional[str] = typer.Option(None, help="comma-separated: zero, mean, streaming, rope_high, rope_medium, "
                                                "rope_low, nope [default: zero,mean,streaming; zero,mean with --method attribution]"),
    heads: str = typer.Option("all", help="all, or LAYER:HEAD pairs, e.g. 3:1,17:0"),
    sink: int = typer.Option(4, help="streaming: keys 0..SINK-1 stay visible (DuoAttention: 128 on long contexts)"),
    window: int = typer.Option(64, help="streaming: the last WINDOW keys stay visible, the query included (DuoAttention: 256)"),
    n_remove: int = typer.Option(6, help="rope_*: planes of the band left unrotated (paper 004: 6)"),
    bootstrap: int = typer.Option(1000, help="prompt resamples for the 95%% interval of dnll"),
    method: str = typer.Option("exact", help="exact (cached residual stream, heads batched) | naive (one full forward per "
                               "head, intervention and prompt: the reference) | attribution (linearised zero / mean effects "
                               "from one forward and one backward per prompt; kl empty)"),
    atlas: Optional[Path] = typer.Option(None, help="an atlas.csv (interp atlas) whose roles the page shows on hover"),
    max_logits_gb: float = typer.Option(1.0, help="bound on one forward's logits (rows x tokens x vocab float32)"),
    out: Path = typer.Option(Path("out/effects"), help="output folder (created; effects.csv, effects.json, effects.html go in it)"),
    device: str = DEVICE,
    dtype: str = DTYPE,
    top: int = typer.Option(10, help="rows of the largest-effect table to print"),
) -> None:
    """Causal head effects: next-token NLL change (with a 95% bootstrap interval over prompts) and KL when each head is
    zeroed, mean-ablated, restricted to DuoAttention's A-shape (streaming) or has RoPE planes unrotated; --method
    attribution gives the linearised zero / mean effects (Nanda 2023; Syed et al. 2023) from one backward pass.

    Writes effects.csv (layer, head, intervention, dnll, dnll_lo, dnll_hi, kl; atomically: an interrupted run leaves
    no new file), effects.json (clean NLL, settings, timing) and effects.html (a layer x head grid per intervention).
    """
    t_start = time.perf_counter()
    from interp.experiments.effects import EffectsConfig, model_grid, parse_heads, parse_interventions

    if method not in ("exact", "naive", "attribution"):
        _fail(InterpError(f"unknown --method {method!r}; use exact, naive or attribution"))
    if interventions is None:
        interventions = "zero,mean" if method == "attribution" else "zero,mean,streaming"
    try:
        cfg = EffectsConfig(interventions=parse_interventions(interventions), heads=parse_heads(heads), sink=sink, window=window,
                            n_remove=n_remove, bootstrap=bootstrap, seed=seed, max_logits_gb=max_logits_gb)
        bad = [k for k in cfg.interventions if k not in ("zero", "mean")]
        if method == "attribution" and bad:
            raise InterpError(f"--method attribution linearises zero and mean only, got {', '.join(bad)}; use --method exact for them")
        grid = model_grid(model)
        cfg.check(*(grid or (None, None)), n_tokens=tokens)
    except InterpError as err:
        _fail(err)
    _check_paths(out, writes="effects.csv, effects.json, effects.html", files={"--atlas": atlas}, model=model)

    import pandas as pd

    from interp import corpus as corpus_mod
    from interp.experiments.attribution import attribution_effects
    from interp.experiments.effects import head_effects, naive_effects
    from interp.models import load_model
    from interp.report.effects_page import write_effects

    try:
        with console.status(f"loading {model}"):
            m = load_model(model, device=device, dtype=dtype)
        cfg.check(m.card.n_layers, m.card.n_heads, tokens)
        p = corpus_mod.prompts(m, corpus, prompts, tokens, seed)
        run = {"exact": head_effects, "naive": naive_effects, "attribution": attribution_effects}[method]
        kw = {"log": lambda s: console.print(escape(s), soft_wrap=True)} if method == "exact" else {}
        res = run(m, p, cfg, progress=True, **kw)
    except InterpError as err:
        _fail(err)
    res.meta.update(corpus=corpus, seed=seed)
    write_effects(res, out, pd.read_csv(atlas) if atlas is not None else None)
    t = res.table
    _show(t.reindex(t["dnll"].abs().sort_values(ascending=False).index), "Largest effects (dnll, nats per prediction)",
          list(t.columns), top)
    console.print(f"{escape(m.card.name)}: {_plural(len(p), 'prompt')} x {tokens} tokens, clean NLL {res.clean_nll:.4f} nats; "
                  f"{len(t)} head x intervention rows in {res.meta['seconds']:.1f} s ({method}), total "
                  f"{time.perf_counter() - t_start:.1f} s wall; wrote {out}/effects.csv and {out}/effects.html", soft_wrap=True)


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":
    main()
