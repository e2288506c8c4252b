"""Cost of every head's causal effect (``interp effects``) against one plain scan and against the naive loop, in one run.

On the same prompts, in one process, one after the other:

- ``scan``: ``interp.scan`` with the default measures (what ``interp scan`` runs; on a GPU the Triton engine);
- ``forward``: one plain forward of the model per prompt (with the LM head), the floor of any method;
- ``effects``: ``interp.experiments.effects.head_effects`` for every head and every intervention of
  ``--interventions`` (default zero, mean, streaming): one clean pass caching the residual stream, then for the heads
  of layer l only layers l..L-1, many heads x prompts as batch rows (``--max-logits-gb`` bounds the rows);
- ``naive``: ``naive_effects``, one full forward of the whole model per head, intervention and prompt. With
  ``--naive-heads K`` only K heads spread over the layers run and the time is scaled to every head (``extrapolated``
  says so); the default runs every head.

- ``attribution``: ``interp.experiments.attribution.attribution_effects`` (linearised zero and mean effects of every
  head, one forward and one backward per prompt; Nanda 2023, Syed et al. 2023), with ``--attribution``.

``ratio`` = seconds / ``scan`` seconds (for ``attribution``: / ``scan_ref_s``, the scan of its own run; with
``--only-attribution`` a run times one scan and attribution patching only and replaces that row alone);
``speedup`` (on the ``effects`` row) = naive seconds / effects seconds;
``cpu_s``, ``ratio_cpu``, ``speedup_cpu``: the same from this process's CPU time (on a CPU run with one thread, what
other load on the machine changes least; wall time on a shared machine can differ by a third between runs);
``max_abs_diff`` = the largest |dnll| or |kl| difference between the fast path and the naive loop over the heads both
ran (nats; the tests hold it under 1e-4). Wall seconds, with the GPU synchronised; one warm-up run of each method on
one layer first (Triton compilation, first-call costs). ``--random-weights`` builds the model from its published
config with random weights (seed 0) and random prompts: the cost is the same, and a GGUF file of 98 MB cannot travel
to the GPU machine. Writes ``figures/effects_cost.csv`` (replacing the rows of the same model, weights and device,
keeping the others) and, for the zoo weights only, the fast path's table ``figures/effects_<model>.csv``
(``interp effects``' columns, 1000 bootstrap resamples; rows of other interventions on the same prompts are kept) and, with ``--attribution``,
``figures/attribution_agreement.csv`` (``interp.experiments.attribution.agreement``: Spearman's rho of attributed
against exact zero / mean effects over all heads and per depth third, the worst heads; the model's rows replaced).

    python -m analyses.benchmarks.effects_cost [--model smollm2-135m] [--prompts 8] [--tokens 512] [--device cuda]
        [--random-weights] [--naive-heads K] [--attribution] [--only-attribution] [--quick] [--out DIR]
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from analyses._common import parse_tracked, replace_rows, write_rows

ROOT = Path(__file__).resolve().parents[2]

# published configs, for --random-weights (the vocabulary matters here: the LM head and its softmax run per head)
CONFIGS = {
    "smollm2-135m": ("LlamaConfig", dict(vocab_size=49152, hidden_size=576, num_hidden_layers=30, num_attention_heads=9,
                                         num_key_value_heads=3, head_dim=64, intermediate_size=1536, rope_theta=100000.0,
                                         max_position_embeddings=8192, tie_word_embeddings=True)),
}


def build_random(name: str, device: str):
    """A ``LoadedModel`` with random weights (seed 0) from the named published config, float32, sdpa attention."""
    import transformers

    from interp.models.card import make_card
    from interp.models.loaded import LoadedModel
    from interp.models.tiny import byte_tokenizer

    cls, kw = CONFIGS[name]
    cfg = getattr(transformers, cls)(**kw)
    cfg.architectures = [cls.replace("Config", "ForCausalLM")]
    torch.manual_seed(0)
    with torch.device(device):
        hf = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32, attn_implementation="sdpa").eval()
    card = make_card(name, hf, source="random weights (seed 0) from the published config", quantization="float32")
    return LoadedModel(hf, byte_tokenizer(), card, name)


def _sync(device: str) -> None:
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


CPU_S: dict[int, float] = {}  # id(result) -> this process's CPU seconds for it (robust to other load on the machine)


def timed(fn, device: str):
    """``(wall seconds, result)`` of ``fn()``, the GPU synchronised before and after; the process's CPU seconds of
    the call go to ``CPU_S[id(result)]``."""
    _sync(device)
    c, t = time.process_time(), time.perf_counter()
    out = fn()
    _sync(device)
    wall = time.perf_counter() - t
    CPU_S[id(out)] = time.process_time() - c
    return wall, out


def spread_heads(n_layers: int, n_heads: int, k: int) -> tuple[tuple[int, int], ...]:
    """``k`` heads spread evenly over the layer x head grid (row-major), so the naive sample covers every depth."""
    idx = np.unique(np.linspace(0, n_layers * n_heads - 1, k).round().astype(int))
    return tuple((int(i // n_heads), int(i % n_heads)) for i in idx)


def machine_name(dev: str, threads: int) -> str:
    """The ``device`` column: the GPU's name, or the CPU with its core and thread counts."""
    if str(dev).startswith("cuda"):
        return torch.cuda.get_device_name()
    return f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, {threads} thread(s)"


def base_row(args, model, kinds: tuple[str, ...]) -> dict:
    """The columns every row of one run shares: model, weights, machine, prompt sizes, interventions, heads."""
    return {"model": args.model, "weights": "random (published config)" if args.random_weights else "zoo",
            "device": machine_name(args.device, args.threads), "prompts": args.prompts, "tokens": args.tokens,
            "interventions": ",".join(kinds), "heads": model.card.n_layers * model.card.n_heads}


def time_attribution(model, prompts, warm, linear: tuple[str, ...], dev: str):
    """``(wall seconds, EffectsResult)`` of attribution patching for the ``linear`` interventions on every head, after
    a warm-up on ``warm``; its CPU seconds go to ``CPU_S``."""
    from interp.experiments.attribution import attribution_effects
    from interp.experiments.effects import EffectsConfig

    attribution_effects(model, warm, EffectsConfig(interventions=linear, bootstrap=0))
    return timed(lambda: attribution_effects(model, prompts, EffectsConfig(interventions=linear, bootstrap=1000)), dev)


def attribution_row(args, model, prompts, warm, linear: tuple[str, ...], t_scan: float, c_scan: float) -> pd.DataFrame:
    """``--only-attribution``: time attribution patching after the scan just timed, and replace this model's
    ``attribution`` row of ``effects_cost.csv``; ``ratio`` divides by that scan (``scan_ref_s``), not by the ``scan``
    row of the full run."""
    t_attr, attr = time_attribution(model, prompts, warm, linear, args.device)
    row = pd.DataFrame([{**base_row(args, model, linear), "run": "attribution", "seconds": t_attr, "cpu_s": CPU_S[id(attr)],
                         "runs": args.prompts, "extrapolated": False, "scan_ref_s": t_scan, "ratio": t_attr / t_scan,
                         "ratio_cpu": CPU_S[id(attr)] / c_scan}])
    write_rows(row, args.out / "effects_cost.csv", ("model", "weights", "device", "run"))
    print(row[["model", "seconds", "scan_ref_s", "ratio", "ratio_cpu"]].to_string(index=False))
    return row


def main(argv: list[str] | None = None) -> pd.DataFrame:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--interventions", default="zero,mean,streaming")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--random-weights", action="store_true", help="the model's published config with random weights")
    ap.add_argument("--naive-heads", type=int, default=0, help="heads of the naive loop (0: all)")
    ap.add_argument("--max-logits-gb", type=float, default=1.0)
    ap.add_argument("--threads", type=int, default=1, help="CPU threads (torch.set_num_threads)")
    ap.add_argument("--attribution", action="store_true", help="also attribution patching and its agreement with the exact effects")
    ap.add_argument("--only-attribution", action="store_true", help="time one scan and attribution patching only, and replace "
                    "this model's attribution row (its ratio to the scan of the same run)")
    ap.add_argument("--quick", action="store_true", help="tiny-llama, 2 prompts x 32 tokens, every head (for the tests)")
    ap.add_argument("--out", type=Path, default=ROOT / "figures")
    args = parse_tracked(ap, argv, __file__)
    if args.quick:
        args.model, args.prompts, args.tokens, args.random_weights = "tiny-llama", 2, 32, False
    torch.set_num_threads(args.threads)
    import interp
    from interp.engine import ScanConfig, scan
    from interp.experiments.attribution import agreement  # every import before the long runs
    from interp.experiments.effects import EffectsConfig, head_effects, naive_effects, parse_interventions

    kinds = parse_interventions(args.interventions)
    linear = tuple(k for k in kinds if k in ("zero", "mean"))
    if args.only_attribution and not linear:
        ap.error(f"--only-attribution times attribution patching, which linearises zero and mean; --interventions "
                 f"{args.interventions} has neither")
    dev = args.device
    if args.random_weights:
        model = build_random(args.model, dev)
        prompts = torch.randint(0, model.card.vocab_size, (args.prompts, args.tokens), generator=torch.Generator().manual_seed(0))
    else:
        model = interp.load_model(args.model, device=dev)
        prompts = interp.corpus.prompts(model, "pydoc", args.prompts, args.tokens)
    L, H = model.card.n_layers, model.card.n_heads
    cfg = EffectsConfig(interventions=kinds, bootstrap=1000, max_logits_gb=args.max_logits_gb)
    naive_heads = spread_heads(L, H, args.naive_heads) if 0 < args.naive_heads < L * H else None
    # warm-up: a short scan, and one layer's heads on one short prompt by each method timed here
    warm = prompts[:1, : min(64, args.tokens)]
    scan(model, warm, ScanConfig())
    if not args.only_attribution:
        head_effects(model, warm, EffectsConfig(interventions=kinds, heads=tuple((L - 1, h) for h in range(H)), bootstrap=0))
        naive_effects(model, warm, EffectsConfig(interventions=kinds, heads=((L - 1, 0),), bootstrap=0))

    def forward():
        with torch.inference_mode():
            for p in prompts:
                model.hf(p[None].to(model.device), use_cache=False)

    t_scan, res_scan = timed(lambda: scan(model, prompts, ScanConfig()), dev)
    c_scan = CPU_S[id(res_scan)]
    if args.only_attribution:
        return attribution_row(args, model, prompts, warm, linear, t_scan, c_scan)
    c0 = time.process_time()
    t_fwd, _ = timed(forward, dev)
    c_fwd = time.process_time() - c0
    t_eff, fast = timed(lambda: head_effects(model, prompts, cfg), dev)
    args.out.mkdir(parents=True, exist_ok=True)  # the fast path's table first: the longest run is kept whatever follows
    table, path = fast.table.assign(model=args.model, prompts=args.prompts, tokens=args.tokens), args.out / f"effects_{args.model}.csv"
    if path.exists() and not args.random_weights:  # keep other interventions on the same prompts (effects_roles.py adds some)
        old = pd.read_csv(path)
        table = replace_rows(old[(old["prompts"] == args.prompts) & (old["tokens"] == args.tokens)], table, ["intervention"])
    if not args.random_weights:  # a random model's effects are a timing by-product, not the zoo model's table
        table.to_csv(path, index=False)
    if args.attribution and linear:
        t_attr, attr = time_attribution(model, prompts, warm, linear, dev)
    t_naive, slow = timed(lambda: naive_effects(model, prompts, EffectsConfig(interventions=kinds, heads=naive_heads, bootstrap=0)), dev)
    runs_all = L * H * len(kinds) * args.prompts
    runs_naive = (len(naive_heads) if naive_heads else L * H) * len(kinds) * args.prompts
    t_naive_all = t_naive * runs_all / runs_naive
    key = ["layer", "head", "intervention"]
    both = fast.table.merge(slow.table, on=key, suffixes=("", "_naive"))
    diff = float(max((both["dnll"] - both["dnll_naive"]).abs().max(), (both["kl"] - both["kl_naive"]).abs().max()))
    base = base_row(args, model, kinds)
    c_eff, c_naive_all = CPU_S[id(fast)], CPU_S[id(slow)] * runs_all / runs_naive
    rows = [
        {**base, "run": "scan", "seconds": t_scan, "cpu_s": c_scan, "runs": args.prompts, "extrapolated": False},
        {**base, "run": "forward", "seconds": t_fwd, "cpu_s": c_fwd, "runs": args.prompts, "extrapolated": False},
        {**base, "run": "effects", "seconds": t_eff, "cpu_s": c_eff, "runs": runs_all, "extrapolated": False,
         "rows_per_forward": fast.meta["rows_per_forward"], "clean_pass_s": fast.meta["clean_pass"]},
        {**base, "run": "naive", "seconds": t_naive_all, "cpu_s": c_naive_all, "runs": runs_all,
         "extrapolated": naive_heads is not None, "measured_s": t_naive, "measured_runs": runs_naive},
    ]
    if args.attribution and linear:
        rows.append({**base, "run": "attribution", "seconds": t_attr, "cpu_s": CPU_S[id(attr)], "runs": args.prompts,
                     "extrapolated": False, "interventions": ",".join(linear), "scan_ref_s": t_scan})
    df = pd.DataFrame(rows)
    df["ratio"] = df["seconds"] / t_scan
    df["ratio_cpu"] = df["cpu_s"] / c_scan
    df["speedup"] = np.where(df["run"] == "effects", t_naive_all / t_eff, np.nan)
    df["speedup_cpu"] = np.where(df["run"] == "effects", c_naive_all / c_eff, np.nan)
    df["max_abs_diff"] = np.where(df["run"].isin(["effects", "naive"]), diff, np.nan)
    args.out.mkdir(parents=True, exist_ok=True)
    # one row set per model, weights and device: a GPU run with random weights keeps the CPU run's rows
    write_rows(df, args.out / "effects_cost.csv", ("model", "weights", "device"))
    if args.attribution and linear and not args.random_weights:  # agreement is a property of the trained model
        agree = agreement(fast.table[fast.table["intervention"].isin(linear)], attr.table, L).assign(
            model=args.model, prompts=args.prompts, tokens=args.tokens)
        write_rows(agree, args.out / "attribution_agreement.csv")
        print(agree[["intervention", "depth", "heads", "spearman", "sign_agree", "worst"]].to_string(index=False))
    print(df[["run", "seconds", "cpu_s", "runs", "ratio", "ratio_cpu", "speedup", "speedup_cpu", "max_abs_diff",
              "extrapolated"]].to_string(index=False))
    return df


if __name__ == "__main__":
    main()
