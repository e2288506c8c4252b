"""Size and load time of the HTML pages interp writes: the scan report and the token viewer (issue 21, engineering).

Pages: ``report.html`` of a scan (``interp.report.page.write_report``, what ``interp scan`` / ``make report`` write;
plotly.js inlined, so the page works offline) and the token viewer (``interp.report.viewer.attention_view``, what
``interp view`` writes) at two scopes: every layer and head over a 128-token window, and one layer's heads over 512
tokens (the viewer's default window; all 270 heads at 512 tokens exceed its ``max_values`` guard).

Load time: each page is opened ``--repeats`` times in headless Chromium (``chromium --headless=new --dump-dom``,
a fresh browser each time) with a script appended that writes ``performance.now()`` at the ``load`` event (after
every inline script, plotly's drawing included, has run) into the DOM; the table keeps the median and minimum of
that in-browser time (``load_ms``: from navigation start to the load event) and the median wall time of the whole
Chromium process (``wall_s``: start-up included). An empty page gives the baseline row (``page = empty``).

Writes ``figures/page_load.csv``: ``page, model, scope, bytes, mb`` (bytes / 1e6), ``load_ms_median, load_ms_min, wall_s_median, repeats,
load_1min`` (the machine's 1-minute load average before the run: the times are only as good as the machine was
idle), ``machine``.

    python -m analyses.benchmarks.page_load [--model smollm2-135m] [--prompts 2] [--tokens 1024] [--repeats 5] [--quick] [--out DIR]

``--quick``: tiny-llama, 1 prompt x 64 tokens, viewer windows of 32 tokens, 1 repeat; writes into ``--out``.
The scan report's size depends on the model (heads, layers) and little on the prompts (maps are averaged); the
full run uses 2 prompts of 1,024 tokens.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import pandas as pd

from analyses._common import parse_tracked

ROOT = Path(__file__).resolve().parents[2]
FIG = ROOT / "figures"
PROBE = ("<script>window.addEventListener('load',function(){var d=document.createElement('div');"
         "d.id='interp-load-ms';d.textContent=String(performance.now());document.body.appendChild(d);});</script>")
PROBE_RE = re.compile(r'id="interp-load-ms">([0-9.]+)<')


def chromium() -> str | None:
    """The Chromium executable, or None."""
    return next((p for p in (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")) if p), None)


def load_once(browser: str, page: Path, timeout: float = 300) -> tuple[float, float]:
    """``(load_ms, wall_s)`` of one headless Chromium opening ``page`` (a copy with ``PROBE`` appended).

    Raises:
        RuntimeError: Chromium did not print the probe (the page failed to load or Chromium failed).
    """
    with tempfile.TemporaryDirectory() as d:
        probe = Path(d) / page.name
        probe.write_text(page.read_text(encoding="utf-8") + PROBE, encoding="utf-8")
        cmd = [browser, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", f"--user-data-dir={d}/profile",
               "--dump-dom", probe.as_uri()]
        t0 = time.perf_counter()
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        wall = time.perf_counter() - t0
    m = PROBE_RE.search(out.stdout)
    if not m:
        raise RuntimeError(f"chromium did not report a load time for {page.name}: {out.stderr[-300:]}")
    return float(m.group(1)), wall


def build_pages(model_name: str, n_prompts: int, n_tokens: int, windows: tuple[int, int], d: Path) -> list[dict]:
    """Write the pages into ``d``; returns ``[{page, model, scope, path}]``."""
    import interp
    from interp.report.page import write_report
    from interp.report.viewer import attention_view

    model = interp.load_model(model_name, device="cpu")
    prompts = interp.corpus.prompts(model, "pydoc", n_prompts, n_tokens)
    res = interp.scan(model, prompts)
    pages = [{"page": "report", "model": model_name, "scope": f"{n_prompts} x {n_tokens} tokens", "path": write_report(res, d / "report.html")}]
    wide, long = windows
    text = prompts[0]
    v = attention_view(model, text, window=wide)
    pages.append({"page": "viewer", "model": model_name, "scope": f"all {model.card.n_layers} layers x {model.card.n_heads} heads, {wide} tokens",
                  "path": v.save(d / "viewer_all.html")})
    v = attention_view(model, text, layers=[model.card.n_layers // 2], window=long)
    pages.append({"page": "viewer", "model": model_name, "scope": f"1 layer x {model.card.n_heads} heads, {long} tokens",
                  "path": v.save(d / "viewer_layer.html")})
    empty = d / "empty.html"
    empty.write_text("<!doctype html><html><head><meta charset='utf-8'></head><body></body></html>", encoding="utf-8")
    pages.insert(0, {"page": "empty", "model": "", "scope": "baseline", "path": empty})
    return pages


def main(argv: list[str] | None = None) -> pd.DataFrame:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=1024)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="tiny-llama, 64 tokens, 1 repeat (the tests)")
    ap.add_argument("--out", type=Path, default=FIG)
    args = parse_tracked(ap, argv, __file__)
    if args.quick:
        args.model, args.prompts, args.tokens, args.repeats = "tiny-llama", 1, 64, 1
    windows = (32, 32) if args.quick else (128, 512)
    load = os.getloadavg()[0]
    browser = chromium()
    if browser is None:
        print("no chromium found (apt-get install chromium): sizes only, load times NaN")
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for p in build_pages(args.model, args.prompts, args.tokens, windows, Path(d)):
            row = {k: p[k] for k in ("page", "model", "scope")}
            row["bytes"] = p["path"].stat().st_size
            row["mb"] = row["bytes"] / 1e6
            loads, walls = [], []
            for _ in range(args.repeats if browser else 0):
                ms, wall = load_once(browser, p["path"])
                loads.append(ms)
                walls.append(wall)
            row.update(load_ms_median=statistics.median(loads) if loads else float("nan"), load_ms_min=min(loads, default=float("nan")),
                       wall_s_median=statistics.median(walls) if walls else float("nan"), repeats=len(loads))
            rows.append(row)
            print(f"{row['page']} ({row['scope']}): {row['bytes'] / 1e6:.2f} MB, load {row['load_ms_median']:.0f} ms", flush=True)
    df = pd.DataFrame(rows).assign(load_1min=round(load, 1), machine=f"{platform.machine()}, {os.cpu_count()} cores, {platform.system()}")
    args.out.mkdir(parents=True, exist_ok=True)
    df.round(3).to_csv(args.out / "page_load.csv", index=False)
    return df


if __name__ == "__main__":
    main()
