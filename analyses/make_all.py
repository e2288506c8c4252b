"""Regenerate every committed figure: run each analysis script in turn (``make figures``).

    python analyses/make_all.py [--quick] [--only NAME ...] [--out DIR] [--benchmarks]

``--quick`` runs each script's quick mode (seconds to a minute each, for the tests; writes into
``--out``, default a temporary folder so the committed gallery is not overwritten by quick numbers).
Without it every script runs in full and writes into ``figures/``; ``--benchmarks`` adds the timing
scripts (their numbers depend on the machine being otherwise idle). Prints each script's time.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
# name -> path; every script under analyses/ with a main(argv) and a --quick mode (tests/test_analyses_geometry.py checks the list)
SCRIPTS = {
    "band_ablation": HERE / "p004_slash/band_ablation.py",
    "inp_pulse": HERE / "p004_slash/inp_pulse.py",
    "rope_variants_fig7": HERE / "p001_frayed/rope_variants_fig7.py",
    "lemma1_check": HERE / "p001_frayed/lemma1_check.py",
    "frayed_rope": HERE / "p001_frayed/frayed_rope.py",
    "frayed_bootstrap": HERE / "p001_frayed/frayed_bootstrap.py",
    "compare_zoo": HERE / "atlas/compare_zoo.py",
    "ood_ratio": HERE / "p004_slash/ood_ratio.py",
    "massive_values": HERE / "atlas/massive_values.py",
    "band_dose": HERE / "p004_slash/band_dose.py",
    "retrieval_heads": HERE / "atlas/retrieval_heads.py",
    "shape_zoo": HERE / "atlas/shape_zoo.py",
    "head_atlas": HERE / "atlas/head_atlas.py",
    "atlas_null": HERE / "atlas/atlas_null.py",
    "atlas_spread": HERE / "atlas/atlas_spread.py",
    "key_norm_length": HERE / "p001_frayed/key_norm_length.py",
    "cluster_length": HERE / "p001_frayed/cluster_length.py",
    "sdh_count_bootstrap": HERE / "p004_slash/sdh_count_bootstrap.py",
    "sdh_rank_one": HERE / "p004_slash/sdh_rank_one.py",
    "sdh_count_spread": HERE / "p004_slash/sdh_count_spread.py",
    "long_range_slash": HERE / "p004_slash/long_range_slash.py",
    # causal head effects (issue 32 part 3): after head_atlas and retrieval_heads, whose tables they read
    "effects_roles": HERE / "effects/effects_roles.py",
    "streaming_criterion": HERE / "effects/streaming_criterion.py",
    "retrieval_masking": HERE / "effects/retrieval_masking.py",
    "patching_zoo": HERE / "effects/patching_zoo.py",  # issue 44: after head_atlas and effects_roles, whose tables it joins
    "kv_budget": HERE / "effects/kv_budget.py",  # issue 48: after effects_roles and streaming_criterion, whose effects it ranks against
    "induction_ablation": HERE / "effects/induction_ablation.py",
    "rope_band_heads": HERE / "effects/rope_band_heads.py",
    # the lab (issue 9): small models trained on CPU
    "copy_2d_rope": HERE / "p000_copy/copy_2d_rope.py",
    "copy_2d_rope_seeds": HERE / "p000_copy/copy_2d_rope_seeds.py",
    "copy_attempts": HERE / "p000_copy/copy_attempts.py",
    "leave_one_out": HERE / "p003_sparsity/leave_one_out.py",
    "dyck_depth": HERE / "p002_dyck/dyck_depth.py",
    "sparse_parity": HERE / "p003_sparsity/sparse_parity.py",
    "ppc_scratchpad": HERE / "p003_sparsity/ppc_scratchpad.py",
    "rope_id_lm": HERE / "p001_frayed/rope_id_lm.py",
    # training dynamics (issue 35): heads watched as they form
    "icl_two_stage": HERE / "emergence/icl_two_stage.py",
    "icl_band_removal": HERE / "emergence/icl_band_removal.py",
    "icl_lr": HERE / "emergence/icl_lr.py",
    "induction_text": HERE / "emergence/induction_text.py",
    "induction_textprobe": HERE / "emergence/induction_text.py",  # a second run of it: ARGV
    "induction_textrepeat": HERE / "emergence/induction_text.py",  # a third: the positive control
}
# the scripts run with arguments beyond --quick / --out (a second study from one script)
ARGV = {"induction_textprobe": ["--probes", "text", "--name", "emergence_textprobe", "--steps", "3000", "--every", "100", "--seeds", "1",
                               "--device", "cpu"],
        "induction_textrepeat": ["--repeat-frac", "0.25", "--batch", "16", "--steps", "3000", "--every", "100", "--device", "cpu",
                                 "--name", "emergence_textrepeat"]}
OPTIONAL = {"pca_snapshot": HERE / "p001_frayed/pca_snapshot.py", "embedding_cone": HERE / "p004_slash/embedding_cone.py"}  # present once issue 8's part lands
BENCHMARKS = {"ablation_cost": HERE / "benchmarks" / "ablation_cost.py", "dtype_error": HERE / "benchmarks" / "dtype_error.py",
              "ray_throughput": HERE / "benchmarks" / "ray_throughput.py", "sweep_cost": HERE / "benchmarks" / "sweep_cost.py",
              "startup": HERE / "benchmarks" / "startup.py", "atlas_cost": HERE / "benchmarks" / "atlas_cost.py",
              "page_load": HERE / "benchmarks" / "page_load.py",
              "gpu_scan": HERE / "benchmarks" / "gpu_scan.py",  # full mode needs a CUDA GPU (skips, saying so, without one)
              "sink_estimate": HERE / "benchmarks" / "sink_estimate.py",
              "effects_cost": HERE / "benchmarks" / "effects_cost.py",
              "patch_cost": HERE / "benchmarks" / "patch_cost.py"}


def scripts(benchmarks: bool = False) -> dict[str, Path]:
    """The scripts ``make_all`` runs, in order."""
    out = dict(SCRIPTS)
    out.update({k: p for k, p in OPTIONAL.items() if p.exists()})
    if benchmarks:
        out.update(BENCHMARKS)
    return out


def run(name: str, path: Path, argv: list[str]) -> float:
    """Import ``path`` as a module and call its ``main(argv)``; returns seconds."""
    spec = importlib.util.spec_from_file_location(f"analyses_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.parent))
    try:
        spec.loader.exec_module(mod)
        t0 = time.perf_counter()
        mod.main(argv)
        return time.perf_counter() - t0
    finally:
        sys.path.remove(str(path.parent))


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
    for name, path in todo.items():
        argv_ = (["--quick"] if args.quick else []) + (["--out", str(out)] if out else []) + ARGV.get(name, [])
        times[name] = run(name, path, argv_)
        print(f"[make_all] {name}: {times[name]:.0f} s", flush=True)
    print(f"[make_all] {len(times)} scripts in {sum(times.values()):.0f} s" + (f"; outputs in {out}" if out else "; outputs in figures/"))
    return times


if __name__ == "__main__":
    main()
