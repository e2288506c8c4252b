"""The scan on a GPU at the papers' scale: scan time / the model's own sdpa forward, and peak GPU memory.

Models are built from the published configs of Llama-3.1-8B, Qwen2.5-7B and Gemma-3-4B with random weights (weights
do not change speed; nothing is downloaded), in bfloat16 on the GPU. For each model and length (4k, 8k, 32k tokens),
in one run:

- ``forward_s``: the decoder stack's own forward (``attn_implementation="sdpa"``, no LM head: the scan never reads
  logits), the floor;
- ``scan_s``: ``interp.scan`` with the default statistics (slash at lags 0..63 and 500..5000, spectrum, norms, sinks
  with the pre-RoPE counterfactual estimated from 256 stratified query rows, cone, maps) on the Triton engine;
- ``scan_exact_s``: the same with the exact pre-RoPE counterfactual (``counterfactual_queries=0``: one more
  log-sum-exp pass over every query), ``scan_full_s``: the whole lag profile (``full_profile=True``, every tile of
  pass 2) with the exact counterfactual: the engine's cost before these two became opt-in;
- ``scan_all_s``: plus the token-matched scores (the atlas' extra tile reductions). InP per plane (``--inp``) is
  left out of the default run: its per-plane loop on CUDA cores took 110 s at 32k tokens on Llama-3.1-8B's shapes
  (an H100, 2026-11-23), 24x the default scan;
- ``ratio`` = scan_s / forward_s, ``ratio_exact``, ``ratio_full``, ``ratio_all``; ``peak_*_gib``:
  ``torch.cuda.max_memory_allocated`` of each, with the model's weights; ``weights_gib``; ``status``: ``ok`` or ``oom``
  (the largest length that fit is the last ``ok``);
- where the time of one default scan goes (``interp.engine.phases``, CUDA events, one more timed scan): ``ph_attention_s``
  (pass 1: output and log-sum-exp; ``pass1`` names the kernel ``interp.engine.kernels.sdpa_lse`` picked),
  ``ph_stats_s`` (pass 2 and the key-0 / map reads; ``pass2`` names the variant ``triton_attention`` picked,
  per-head, packed or packed-small by kv head, and ``pass2_ms`` each one's time on the first layer),
  ``ph_counterfactual_s`` (``cf_rows`` names the sampled-rows variant ``interp.engine.kernels.triton_rows`` picked,
  ``cf_rows_ms`` each one's time on the first layer), ``ph_measures_s`` (every measure's per-layer update), ``ph_flush_s`` (device sums to the
  CPU, once per scan), ``ph_taps_s`` (the taps' own work: the finite check, the pre-RoPE q / k undone from the
  model's, the float32 copies of q / k / v), ``ph_model_s`` (the rest: the model's own layers and Python), ``tables_s``
  (building ``heads`` from the summed state, not part of ``scan_s``), and ``ph_detail``: the inner phases of the same
  scan, ``outer/inner seconds`` joined by `` / `` (each measure's update, ``measures/spectrum``; the taps' parts,
  ``taps/pre``, ``taps/copies``: ``phase_timer(detail=True)``).

Plus the same work on both engines for ``smollm2-135m``'s config (random weights), 1024 tokens in float32: the GPU
(Triton) and this machine's CPU (fused C++ kernel, ``torch.get_num_threads()`` threads), so the engines are compared
on equal work. Times are the minimum over ``--repeats`` after one warm-up (which compiles the Triton kernels).

    python -m analyses.benchmarks.gpu_scan                # on a GPU: writes figures/gpu_scan.csv
    python -m analyses.benchmarks.gpu_scan --quick        # CPU, tiny sizes: checks the script (the tests run this)
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

import pandas as pd
import torch

from analyses._common import parse_tracked

ROOT = Path(__file__).resolve().parents[2]

# The published configs (hidden size, layers, heads, kv heads, head dim, MLP width, RoPE base, window): what
# decides the cost. Vocabularies are cut to 32k: the decoder stack's cost does not depend on them (no LM head).
CONFIGS = {
    "llama-3.1-8b": ("LlamaConfig", dict(hidden_size=4096, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                                         head_dim=128, intermediate_size=14336, rope_theta=500000.0, max_position_embeddings=131072)),
    "qwen2.5-7b": ("Qwen2Config", dict(hidden_size=3584, num_hidden_layers=28, num_attention_heads=28, num_key_value_heads=4,
                                       intermediate_size=18944, rope_theta=1000000.0, max_position_embeddings=131072)),
    "gemma-3-4b": ("Gemma3TextConfig", dict(hidden_size=2560, num_hidden_layers=34, num_attention_heads=8, num_key_value_heads=4,
                                            head_dim=256, intermediate_size=10240, query_pre_attn_scalar=256, sliding_window=1024,
                                            rope_theta=1000000.0, max_position_embeddings=131072)),
    "smollm2-135m": ("LlamaConfig", dict(hidden_size=576, num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3,
                                         head_dim=64, intermediate_size=1536, rope_theta=100000.0, max_position_embeddings=8192)),
}
QUICK = ("LlamaConfig", dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                             intermediate_size=128, max_position_embeddings=4096))


def build(name: str, device: str, dtype: torch.dtype, quick: bool = False):
    """A ``LoadedModel`` with random weights (seed 0) from the named config, on ``device`` in ``dtype``."""
    import transformers

    from interp.models.card import make_card
    from interp.models.loaded import LoadedModel
    from interp.models.tiny import byte_tokenizer

    cls, kw = QUICK if quick else CONFIGS[name]
    cfg = getattr(transformers, cls)(vocab_size=32000, **kw)
    cfg.architectures = [cls.replace("TextConfig", "ForCausalLM").replace("Config", "ForCausalLM")]
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    with torch.device(device):
        hf = transformers.AutoModelForCausalLM.from_config(cfg, dtype=dtype, attn_implementation="sdpa")
    card = make_card(name, hf, source="random weights (seed 0) from the published config", quantization=str(dtype))
    return LoadedModel(hf, byte_tokenizer(), card, name)


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def timed(fn, device: str, repeats: int) -> tuple[float, float]:
    """``(min seconds over repeats after one warm-up, peak GiB allocated)``."""
    fn()
    _sync(device)
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        _sync(device)
        best = min(best, time.perf_counter() - t)
    peak = torch.cuda.max_memory_allocated() / 2**30 if device.startswith("cuda") else float("nan")
    return best, peak


PHASES = ("taps", "attention", "stats", "counterfactual", "measures", "flush")


def phases(model, toks, device: str, engine: str) -> dict:
    """Seconds per phase of one default scan (``interp.engine.phases``), the rest as ``ph_model_s``, the inner phases as
    ``ph_detail``, and ``tables_s``."""
    from interp.engine import ScanConfig, scan
    from interp.engine.phases import phase_timer

    _sync(device)
    with phase_timer(detail=True) as timer:
        t = time.perf_counter()
        res = scan(model, [toks], ScanConfig(), engine=engine, beyond_context=True)
        _sync(device)
        wall = time.perf_counter() - t
    sec = timer.top
    row = {f"ph_{p}_s": sec.get(p, 0.0) for p in PHASES}
    row["ph_model_s"] = wall - sum(row.values())
    row["ph_detail"] = " / ".join(f"{k} {v:.3g}" for k, v in sorted(timer.detail.items(), key=lambda kv: -kv[1]))
    t = time.perf_counter()
    res.heads
    row["tables_s"] = time.perf_counter() - t
    return row


def measure(model, n: int, device: str, repeats: int, engine: str) -> dict:
    """One row: forward and scan times at ``n`` tokens."""
    from interp.engine import ScanConfig, scan
    from interp.engine.kernels import sdpa_lse

    toks = torch.randint(0, 32000 if n > 64 else 200, (n,), generator=torch.Generator().manual_seed(n))
    ids = toks[None].to(device)

    def forward():
        with torch.inference_mode():
            model.hf.base_model(ids, use_cache=False)

    row = {"model": model.card.name, "tokens": n, "dtype": str(model.dtype).removeprefix("torch."), "engine": engine}
    try:
        row["forward_s"], row["peak_forward_gib"] = timed(forward, device, repeats)
        row["scan_s"], row["peak_scan_gib"] = timed(lambda: scan(model, [toks], ScanConfig(), engine=engine, beyond_context=True),
                                                    device, repeats)
        row.update(phases(model, toks, device, engine))
        picked = [c["picked"] for k, c in sdpa_lse.choices().items() if k.startswith(f"pos<={1 << max(0, (n - 1).bit_length())} ")]
        row["pass1"] = picked[0] if picked else ("triton" if device.startswith("cuda") else "none (CPU)")
        row.update(pass2_pick(n, model.card.n_heads, device))
        row.update(rows_pick(n, model.card.n_heads, device))
        for tag, cfg in (("exact", ScanConfig(counterfactual_queries=0)), ("full", ScanConfig(counterfactual_queries=0, full_profile=True))):
            row[f"scan_{tag}_s"], row[f"peak_scan_{tag}_gib"] = timed(
                lambda cfg=cfg: scan(model, [toks], cfg, engine=engine, beyond_context=True), device, 1)
        all_on = ScanConfig(token_match=True)
        row["scan_all_s"], row["peak_scan_all_gib"] = timed(lambda: scan(model, [toks], all_on, engine=engine, beyond_context=True),
                                                            device, 1)
        row["status"] = "ok"
    except torch.OutOfMemoryError:
        row["status"] = "oom"
        torch.cuda.empty_cache()
    if row["status"] == "ok":
        for tag in ("", "_exact", "_full", "_all"):
            row[f"ratio{tag}"] = row[f"scan{tag}_s"] / row["forward_s"]
    return row


def picked(choices: dict[str, dict], n: int, heads: int, device: str, column: str, gpu_default: str) -> dict:
    """``column``: the variant a per-shape choice (``choices``, as ``triton_attention.pass2_choices``) picked for this
    length and head count (``gpu_default`` on a GPU where none was measured), ``column_ms``: each valid variant's
    milliseconds on the first layer."""
    found = [c for k, c in choices.items() if k.startswith(f"pos<={1 << max(0, (n - 1).bit_length())} h{heads} ")]
    if not found:
        return {column: gpu_default if device.startswith("cuda") else "none (CPU)", f"{column}_ms": ""}
    return {column: found[0]["picked"], f"{column}_ms": " / ".join(f"{k} {v:.3g}" for k, v in found[0]["ms"].items())}


def pass2_pick(n: int, heads: int, device: str) -> dict:
    """``pass2``: the pass-2 variant ``triton_attention`` picked for this length and head count, for the first
    reductions timed at it (the default scan's; per-head where no choice was measured), ``pass2_ms``: each valid
    variant's milliseconds on the first layer."""
    from interp.engine.kernels import triton_attention as ta

    return picked(ta.pass2_choices(), n, heads, device, "pass2", "per-head")


def rows_pick(n: int, heads: int, device: str) -> dict:
    """``cf_rows``: the variant ``triton_rows`` picked for the pre-RoPE counterfactual's sampled rows at this length and
    head count, ``cf_rows_ms``: each valid variant's milliseconds on the first layer."""
    from interp.engine.kernels import triton_rows as tr

    return picked(tr.rows_choices(), n, heads, device, "cf_rows", "triton")


def profile(model, n: int) -> None:
    """Print the CUDA kernels that take the most time in one default scan of ``n`` tokens."""
    from torch.profiler import ProfilerActivity, profile as prof

    from interp.engine import ScanConfig, scan

    toks = torch.randint(0, 32000, (n,), generator=torch.Generator().manual_seed(n))
    with prof(activities=[ProfilerActivity.CUDA]) as p:
        scan(model, [toks], ScanConfig(), engine="triton", beyond_context=True)
        torch.cuda.synchronize()
    print(p.key_averages().table(sort_by="cuda_time_total", row_limit=15, max_name_column_width=60), flush=True)


def main(argv=None) -> pd.DataFrame:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="CPU, a tiny config, 32-64 tokens: checks the script runs")
    ap.add_argument("--models", nargs="*", default=["llama-3.1-8b", "qwen2.5-7b", "gemma-3-4b"])
    ap.add_argument("--lengths", nargs="*", type=int, default=[4096, 8192, 32768])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--out", type=Path, default=ROOT / "figures" / "gpu_scan.csv", help="the CSV, or a folder for gpu_scan.csv")
    ap.add_argument("--profile", action="store_true", help="also print the top CUDA kernels of one scan of the first model "
                    "at the longest length (torch.profiler)")
    a = parse_tracked(ap, argv, __file__)
    if a.out.is_dir() or not a.out.suffix:
        a.out = a.out / "gpu_scan.csv"
    rows = []
    if a.quick:
        m = build("quick", "cpu", torch.float32, quick=True)
        rows += [measure(m, n, "cpu", 1, "auto") for n in (32, 64)]
        gpu = "none (quick mode, CPU)"
    else:
        if not torch.cuda.is_available():
            print("gpu_scan.py needs a CUDA GPU (run with --quick to check the script on a CPU); nothing measured", file=sys.stderr)
            return pd.DataFrame()
        from interp.engine.kernels import sdpa_lse
        from interp.engine.kernels import triton_attention as ta

        gpu = torch.cuda.get_device_name()
        for name in a.models:
            m = build(name, "cuda", torch.bfloat16)
            weights = torch.cuda.memory_allocated() / 2**30
            for n in a.lengths:
                row = measure(m, n, "cuda", a.repeats, "triton")
                row["weights_gib"] = weights
                rows.append(row)
                print(row, flush=True)
                print(sdpa_lse.choices(), ta.pass2_choices(), flush=True)
                pd.DataFrame(rows).to_csv(a.out.with_suffix(".partial.csv"), index=False)  # survives a time limit
            if a.profile and name == a.models[0]:
                profile(m, max(a.lengths))
            del m
            torch.cuda.empty_cache()
        # equal work on both engines: smollm2-135m's config, float32, 1024 tokens
        for device, engine in (("cuda", "triton"), ("cpu", "auto")):
            m = build("smollm2-135m", device, torch.float32)
            row = measure(m, 1024, device, a.repeats, engine)
            row["cpu_threads"] = torch.get_num_threads() if device == "cpu" else None
            rows.append(row)
            print(row, flush=True)
    df = pd.DataFrame(rows)
    df.insert(0, "device", [gpu if r.get("engine") == "triton" or a.quick else f"CPU: {platform.processor() or platform.machine()}"
                            for r in rows])
    if not a.quick or a.out != ROOT / "figures" / "gpu_scan.csv":
        a.out.parent.mkdir(parents=True, exist_ok=True)
        df.to_csv(a.out, index=False, float_format="%.4g")
    print(df.to_string(index=False))
    return df


if __name__ == "__main__":
    sys.exit(2 if main().empty else 0)
