"""Scan speed and memory against the plain forward and the cache-all-patterns route.

For each prompt length N (default 1024, 2048, 4096, 8192) on one pydoc prompt, in one run:

- ``forward``: the plain HF forward with sdpa (the floor);
- ``forward_decoder``: the same without the LM head (what the scan runs: it reads attention, not logits);
- ``scan``: ``interp.scan`` with every measurement of the head-finding report plus long-range slash (the default:
  the pre-RoPE counterfactual sink weight estimated from 256 stratified query rows per prompt);
- ``scan_exact``: the same with the exact counterfactual (``counterfactual_queries=0``: one more QK^T per layer);
- ``scan_nocf``: the same without the pre-RoPE counterfactual sink weight;
- ``cache``: TransformerLens ``run_with_cache`` on every ``hook_pattern``, then diagonal means (the
  slash scores at every lag), only where the patterns fit in memory.

Times come from one subprocess per length that loads the model once and alternates the decoder-only forward
and the three scans ``--repeats`` times (minimum of each: the ratios are measured side by side in one process, so
a load change on the machine hits all of them alike), then times one more default scan phase by phase
(``interp.engine.phases``: ``taps`` = the finite check and the pre-RoPE q / k recovered from the model's post-RoPE
ones, ``attention`` = the fused kernel's exact attention with its tile statistics,
``counterfactual``, ``measures`` = every measure's per-layer reductions, ``model`` = the rest: projections, MLPs,
norms, the hooks) and the final tables (``heads``). Peak resident memory comes from one subprocess per mode (so
each peak is its own). Prints the table with the ratios and writes ``figures/scan_speed.csv``,
``figures/scan_speed_phases.csv`` (one row per length and phase, seconds and share of the scan) and
``figures/scan_speed.png``; rows already in the tables stay when they are another model's (``--model``) or this model's
at other lengths measured on the same machine; this model's rows from another machine are dropped.

    python -m analyses.benchmarks.scan_speed [--lengths 1024 2048 4096 8192] [--repeats 2] [--model smollm2-135m]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

from analyses._common import replace_rows, track_outputs

ROOT = Path(__file__).resolve().parents[2]
FIG = ROOT / "figures"


def _peak_rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


SCANS = {"scan": {}, "scan_exact": {"counterfactual_queries": 0}, "scan_nocf": {"counterfactual_sinks": False}}
PHASES = ("taps", "attention", "counterfactual", "measures")


def side_by_side(n: int, repeats: int, model_name: str) -> dict:
    """One process: the decoder-only forward and the three scans alternated ``repeats`` times (min of each), then one
    default scan timed by phase and its ``heads`` table."""
    import torch

    import interp
    from interp.engine.phases import phase_timer

    model = interp.load_model(model_name, device="cpu")
    tokens = interp.corpus.prompts(model, "pydoc", 1, n)
    interp.engine.kernels.available()
    with torch.inference_mode():
        model.hf(tokens[:, :64], use_cache=False)  # warm-up
    runs = {"forward_decoder": lambda: model.hf.base_model(tokens, use_cache=False),
            **{m: (lambda kw=kw: interp.scan(model, tokens, interp.ScanConfig(**kw))) for m, kw in SCANS.items()}}
    best = {m: float("inf") for m in runs}
    for _ in range(repeats):
        for m, fn in runs.items():
            t0 = time.perf_counter()
            with torch.inference_mode():
                fn()
            best[m] = min(best[m], time.perf_counter() - t0)
    with phase_timer() as timer:
        t0 = time.perf_counter()
        res = interp.scan(model, tokens)
        wall = time.perf_counter() - t0
    phases = {p: timer.seconds.get(p, 0.0) for p in PHASES}
    phases["model"] = wall - sum(phases.values())
    t0 = time.perf_counter()
    res.heads
    phases["tables"] = time.perf_counter() - t0
    return {"n": n, "seconds": best, "phases": phases, "phase_wall": wall}


def worker(mode: str, n: int, repeats: int, model_name: str) -> dict:
    """Time one mode at one length in this process; returns seconds (min), peak and baseline RSS."""
    import torch

    import interp
    from interp.measures.slash import slash_from_pattern

    model = interp.load_model(model_name, device="cpu")
    tokens = interp.corpus.prompts(model, "pydoc", 1, n)
    if mode == "cache":
        model.bridge  # boot outside the timing
    base = _rss_mb()

    def run() -> None:
        if mode == "forward":
            with torch.inference_mode():
                model.hf(tokens, use_cache=False)
        elif mode == "forward_decoder":
            with torch.inference_mode():
                model.hf.base_model(tokens, use_cache=False)
        elif mode in SCANS:
            interp.scan(model, tokens, interp.ScanConfig(**SCANS[mode]))
        else:
            with torch.inference_mode():
                _, cache = model.bridge.run_with_cache(tokens, names_filter=lambda name: name.endswith("hook_pattern"))
                for layer in range(model.card.n_layers):
                    slash_from_pattern(cache[f"blocks.{layer}.attn.hook_pattern"][0])
                del cache

    interp.engine.kernels.available()  # builds the fused kernel on a fresh machine, outside the timing
    with torch.inference_mode():
        model.hf(tokens[:, :64], use_cache=False)  # warm-up (kernels, allocator)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    return {"mode": mode, "n": n, "seconds": min(times), "peak_rss_mb": _peak_rss_mb(), "base_rss_mb": base}


def _mem_available_mb() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 1024
    return float("inf")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lengths", type=int, nargs="+", default=[1024, 2048, 4096, 8192])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--worker", nargs=2, metavar=("MODE", "N"), help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, default=FIG, help="folder for the tables and the figure")
    args = ap.parse_args()
    if args.worker:
        mode, n = args.worker[0], int(args.worker[1])
        print(json.dumps(side_by_side(n, args.repeats, args.model) if mode == "side" else worker(mode, n, args.repeats, args.model)))
        return
    out = args.out
    track_outputs(out, __file__, sys.argv[1:])  # the parent run writes the tables; its workers only measure

    import pandas as pd

    from interp.models import load_model

    card = load_model(args.model, device="cpu").card
    rows, phase_rows, side = [], [], {}
    for n in args.lengths:
        cmd = [sys.executable, "-m", "analyses.benchmarks.scan_speed", "--worker", "side", str(n), "--repeats", str(args.repeats), "--model", args.model]
        res = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
        if res.returncode != 0:
            print(res.stderr[-2000:], file=sys.stderr)
            raise SystemExit(f"side-by-side worker N={n} failed")
        side[n] = json.loads(res.stdout.strip().splitlines()[-1])
        print(f"N={n} side by side: " + ", ".join(f"{m} {s:.2f} s" for m, s in side[n]["seconds"].items()), flush=True)
        for ph, sec in side[n]["phases"].items():
            phase_rows.append({"n": n, "phase": ph, "seconds": sec, "share_of_scan": sec / side[n]["phase_wall"] if ph != "tables" else float("nan")})
        for mode in ("forward", "forward_decoder", "scan", "scan_exact", "scan_nocf", "cache"):
            pattern_mb = card.n_layers * card.n_heads * n * n * 4 / 2**20
            if mode == "cache" and pattern_mb > 0.5 * _mem_available_mb():
                print(f"N={n}: cache route skipped, its patterns need {pattern_mb / 1024:.1f} GiB", flush=True)
                rows.append({"mode": mode, "n": n, "seconds": float("nan"), "peak_rss_mb": float("nan"), "base_rss_mb": float("nan")})
                continue
            reps = 1  # this subprocess is for the peak memory; times come from the side-by-side run
            cmd = [sys.executable, "-m", "analyses.benchmarks.scan_speed", "--worker", mode, str(n), "--repeats", str(reps), "--model", args.model]
            res = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
            if res.returncode != 0:
                print(res.stderr[-2000:], file=sys.stderr)
                raise SystemExit(f"worker {mode} N={n} failed")
            row = json.loads(res.stdout.strip().splitlines()[-1])
            rows.append(row)
            print(f"N={n} {mode:8s} {row['seconds']:8.2f} s  peak RSS {row['peak_rss_mb'] / 1024:6.2f} GiB", flush=True)
    df = pd.DataFrame(rows)
    wide = df.pivot(index="n", columns="mode", values="seconds")
    for n in args.lengths:  # the ratios' times: side by side in one process (the per-mode processes give memory)
        for m, sec in side[n]["seconds"].items():
            wide.loc[n, m] = sec
    mem = df.pivot(index="n", columns="mode", values="peak_rss_mb") / 1024
    table = pd.DataFrame({
        "forward_s": wide["forward"], "forward_decoder_s": wide["forward_decoder"], "scan_s": wide["scan"],
        "scan_exact_s": wide["scan_exact"], "scan_nocf_s": wide["scan_nocf"], "cache_s": wide.get("cache"),
        "scan/forward": wide["scan"] / wide["forward"], "scan/forward_decoder": wide["scan"] / wide["forward_decoder"],
        "scan_exact/forward_decoder": wide["scan_exact"] / wide["forward_decoder"],
        "scan_nocf/forward_decoder": wide["scan_nocf"] / wide["forward_decoder"],
        "cache/scan": wide.get("cache") / wide["scan"],
        "peak_GiB_forward": mem["forward"], "peak_GiB_scan": mem["scan"], "peak_GiB_scan_exact": mem["scan_exact"],
        "peak_GiB_cache": mem.get("cache"),
    })
    from interp.engine import kernels

    engine = "fused kernel" if kernels.available() else "Python block path"
    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines() if ln.startswith("model name")),
               platform.machine()) if Path("/proc/cpuinfo").exists() else platform.machine()
    machine = (f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, "
               f"torch {__import__('torch').__version__}, {engine}")
    print(f"\nmodel {args.model}; machine: {machine}\n")
    print(table.round(2).to_string())
    out.mkdir(parents=True, exist_ok=True)
    table = table.assign(machine=machine, model=args.model).reset_index()
    phases = pd.DataFrame(phase_rows).assign(model=args.model, machine=machine)
    print(phases.round(3).to_string(index=False))
    for frame, name in ((table, "scan_speed.csv"), (phases, "scan_speed_phases.csv")):  # other models' rows stay
        old = out / name
        if old.exists() and "model" in pd.read_csv(old):
            prev = pd.read_csv(old)
            prev = prev[(prev["model"] != args.model) | (prev["machine"] == machine)]  # never mix machines in one model's rows
            frame = replace_rows(prev, frame, ["model", "n"] + (["phase"] if "phase" in frame else []))
        frame.to_csv(out / name, index=False)
    _plot(pd.read_csv(out / "scan_speed.csv"), out)  # every model in the table, not only this run's


def _plot(table, out: Path = FIG) -> None:
    """Time and peak memory against the prompt length (scan_speed.csv): one colour per model, the line style per run
    (the scan solid, the decoder-only forward dashed, the exact counterfactual dotted); every column is in the table."""
    import plotly.graph_objects as go
    from plotly.colors import qualitative
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, subplot_titles=("time (s)", "peak resident memory (GiB)"))
    runs = ((1, "scan_s", "scan", "solid"), (1, "forward_decoder_s", "forward, no LM head", "dash"),
            (1, "scan_exact_s", "scan, exact counterfactual", "dot"), (2, "peak_GiB_scan", "scan memory", "solid"),
            (2, "peak_GiB_forward", "forward memory", "dash"))
    for k, (model, t) in enumerate(table.groupby("model", sort=False)):
        t, colour = t.sort_values("n").set_index("n"), qualitative.Plotly[k % len(qualitative.Plotly)]
        for col_idx, col, name, dash in runs:
            if col in t and t[col].notna().any():
                fig.add_trace(go.Scatter(x=t.index, y=t[col], mode="lines+markers", name=f"{model}: {name}", legendgroup=model,
                                         line=dict(color=colour, dash=dash)), row=1, col=col_idx)
    fig.update_xaxes(type="log", title="tokens per prompt")
    machines = " / ".join(dict.fromkeys(table["machine"]))  # each model's rows come from one machine
    fig.update_layout(title=f"scan vs the decoder-only forward, per model ({machines})", width=1200, height=500)
    try:  # PNG export needs kaleido and a Chromium (pip install kaleido; apt-get install chromium)
        fig.write_image(out / "scan_speed.png")
    except Exception as err:
        fig.write_html(out / "scan_speed.html", include_plotlyjs=True)
        print(f"PNG not written ({err}); wrote figures/scan_speed.html instead")


if __name__ == "__main__":
    main()
