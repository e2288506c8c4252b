"""Regenerate every committed figure: run each analysis script in turn (``make figures``).

    python -m analyses.make_all [--quick] [--only NAME ...] [--out DIR] [--benchmarks]   (from the repository root)

``--quick`` runs each script's quick mode (seconds to a minute each, for the tests; writes into
``--out``, default a temporary folder so the committed gallery is not overwritten by quick numbers).
Without it every script runs in full and writes into ``figures/``; ``--benchmarks`` adds the timing
scripts (their numbers depend on the machine being otherwise idle). Prints each script's time.
"""

from __future__ import annotations

import argparse
import importlib.util
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
# name -> module; every script under analyses/ with a main(argv) and a --quick mode (tests/test_analyses_geometry.py checks the list)
SCRIPTS = {
    "band_ablation": "analyses.p004_slash.band_ablation",
    "inp_pulse": "analyses.p004_slash.inp_pulse",
    "rope_variants_fig7": "analyses.p001_frayed.rope_variants_fig7",
    "lemma1_check": "analyses.p001_frayed.lemma1_check",
    "frayed_rope": "analyses.p001_frayed.frayed_rope",
    "frayed_bootstrap": "analyses.p001_frayed.frayed_bootstrap",
    "sink_beyond": "analyses.p001_frayed.sink_beyond",  # 001 Fig. 6 past the context (claims 001d, 001e)
    "compare_zoo": "analyses.atlas.compare_zoo",
    "ood_ratio": "analyses.p004_slash.ood_ratio",
    "massive_values": "analyses.atlas.massive_values",
    "band_dose": "analyses.p004_slash.band_dose",
    "retrieval_heads": "analyses.atlas.retrieval_heads",
    "shape_zoo": "analyses.atlas.shape_zoo",
    "head_atlas": "analyses.atlas.head_atlas",
    "atlas_null": "analyses.atlas.atlas_null",
    "atlas_spread": "analyses.atlas.atlas_spread",
    "key_norm_length": "analyses.p001_frayed.key_norm_length",
    "cluster_length": "analyses.p001_frayed.cluster_length",
    "sdh_count_bootstrap": "analyses.p004_slash.sdh_count_bootstrap",
    "sdh_rank_one": "analyses.p004_slash.sdh_rank_one",
    "sdh_count_spread": "analyses.p004_slash.sdh_count_spread",
    "long_range_slash": "analyses.p004_slash.long_range_slash",
    # causal head effects (issue 32 part 3): after head_atlas and retrieval_heads, whose tables they read
    "effects_roles": "analyses.effects.effects_roles",
    "streaming_criterion": "analyses.effects.streaming_criterion",
    "retrieval_masking": "analyses.effects.retrieval_masking",
    "patching_zoo": "analyses.effects.patching_zoo",  # issue 44: after head_atlas and effects_roles, whose tables it joins
    "kv_budget": "analyses.effects.kv_budget",  # issue 48: after effects_roles and streaming_criterion, whose effects it ranks against
    "induction_ablation": "analyses.effects.induction_ablation",
    "rope_band_heads": "analyses.effects.rope_band_heads",
    # the lab (issue 9): small models trained on CPU
    "copy_2d_rope": "analyses.p000_copy.copy_2d_rope",
    "copy_2d_rope_seeds": "analyses.p000_copy.copy_2d_rope_seeds",
    "copy_attempts": "analyses.p000_copy.copy_attempts",
    "copy_finetune": "analyses.p000_copy.copy_finetune",  # claim 000f; sized for a lent GPU: full mode without CUDA skips, saying so
    "leave_one_out": "analyses.p003_sparsity.leave_one_out",
    "dyck_depth": "analyses.p002_dyck.dyck_depth",
    "sparse_parity": "analyses.p003_sparsity.sparse_parity",
    "ppc_scratchpad": "analyses.p003_sparsity.ppc_scratchpad",
    "rope_id_lm": "analyses.p001_frayed.rope_id_lm",
    # sized for a lent GPU (device_check.sh): full mode without CUDA skips, saying so (--quick runs on the CPU)
    "rope_id_sink": "analyses.p001_frayed.rope_id_sink",  # claim 001h: lab models with a sink, RoPE against RoPE-ID
    # training dynamics (issue 35): heads watched as they form
    "icl_two_stage": "analyses.emergence.icl_two_stage",
    "icl_band_removal": "analyses.emergence.icl_band_removal",
    "icl_lr": "analyses.emergence.icl_lr",
    "induction_text": "analyses.emergence.induction_text",
    "induction_textprobe": "analyses.emergence.induction_text",  # a second run of it: ARGV
    "induction_textrepeat": "analyses.emergence.induction_text",  # a third: the positive control
}
# the scripts run with arguments beyond --quick / --out (a second study from one script)
ARGV = {"induction_textprobe": ["--probes", "text", "--name", "emergence_textprobe", "--steps", "3000", "--every", "100", "--seeds", "1",
                               "--device", "cpu"],
        "induction_textrepeat": ["--repeat-frac", "0.25", "--batch", "16", "--steps", "3000", "--every", "100", "--device", "cpu",
                                 "--name", "emergence_textrepeat"]}
OPTIONAL = {"pca_snapshot": "analyses.p001_frayed.pca_snapshot", "embedding_cone": "analyses.p004_slash.embedding_cone"}  # present once issue 8's part lands
BENCHMARKS = {"ablation_cost": "analyses.benchmarks.ablation_cost", "dtype_error": "analyses.benchmarks.dtype_error",
              "ray_throughput": "analyses.benchmarks.ray_throughput", "sweep_cost": "analyses.benchmarks.sweep_cost",
              "startup": "analyses.benchmarks.startup", "atlas_cost": "analyses.benchmarks.atlas_cost",
              "page_load": "analyses.benchmarks.page_load",
              "gpu_scan": "analyses.benchmarks.gpu_scan",  # full mode needs a CUDA GPU (skips, saying so, without one)
              "sink_estimate": "analyses.benchmarks.sink_estimate",
              "effects_cost": "analyses.benchmarks.effects_cost",
              "patch_cost": "analyses.benchmarks.patch_cost",
              "gram_precision": "analyses.benchmarks.gram_precision"}  # emulated on a CPU, hardware on a GPU (--device cuda)


def path_of(module: str) -> Path:
    """The file of a script's module: ``"analyses.p004_slash.band_ablation"`` -> ``analyses/p004_slash/band_ablation.py``."""
    return HERE.parent.joinpath(*module.split(".")).with_suffix(".py")


def scripts(benchmarks: bool = False) -> dict[str, str]:
    """The scripts ``make_all`` runs, in order: name -> module."""
    out = dict(SCRIPTS)
    out.update({k: m for k, m in OPTIONAL.items() if path_of(m).exists()})
    if benchmarks:
        out.update(BENCHMARKS)
    return out


def run(name: str, module: str, argv: list[str]) -> float:
    """Run the script ``module`` (its ``main(argv)``, as ``python -m MODULE ARGV`` would); returns seconds. Each run
    executes a fresh copy of the module (a script run twice with other arguments starts from its own globals)."""
    spec = importlib.util.find_spec(module)
    if spec is None:
        raise SystemExit(f"{name}: no module {module} (run from the repository root: python -m analyses.make_all)")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    t0 = time.perf_counter()
    mod.main(argv)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> dict[str, float]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="each script's quick mode, into --out (default: a temporary folder)")
    ap.add_argument("--only", nargs="+", default=None, help="run only these scripts (names as in SCRIPTS)")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--benchmarks", action="store_true", help="also the timing scripts")
    args = ap.parse_args(argv)
    todo = scripts(args.benchmarks)
    if args.only:
        unknown = sorted(set(args.only) - set(todo))
        if unknown:
            ap.error(f"unknown script(s) {unknown}; choose from {sorted(todo)}")
        todo = {k: v for k, v in todo.items() if k in args.only}
    out = args.out or (Path(tempfile.mkdtemp(prefix="interp-figures-")) if args.quick else None)
    times = {}
    for name, module in todo.items():
        argv_ = (["--quick"] if args.quick else []) + (["--out", str(out)] if out else []) + ARGV.get(name, [])
        times[name] = run(name, module, argv_)
        print(f"[make_all] {name}: {times[name]:.0f} s", flush=True)
    print(f"[make_all] {len(times)} scripts in {sum(times.values()):.0f} s" + (f"; outputs in {out}" if out else "; outputs in figures/"))
    return times


if __name__ == "__main__":
    main()
