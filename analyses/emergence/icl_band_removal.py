"""Which RoPE bands does the SDH of 004 App. D need (claim 004k: "without the medium and high frequencies, slash-dominance
no longer holds")? The reduced two-layer model of ``icl_two_stage.py``, Delta = 1, with one band of the cone planes
removed at a time.

``icl_two_stage.py`` trains with the cone planes at the exact pulse (``pulse``), at standard geometric RoPE frequencies
(``rope``), all below ``N ** -2`` (``low``) or at zero (``nope``): ``low`` removes the medium and high frequencies
together and rescales the rest, so it cannot say which band matters. Here the cone planes of ``pulse`` and ``rope`` are
sorted by frequency and split in three (``interp.lab.icl_regression.remove_bands``: ``numpy.array_split``, high first;
17 planes at N = 33 give 6 / 6 / 5), and the high band, the medium band, or both are set to ``theta = 0`` (unrotated,
as the band ablation of 004 Sec. 5 does in the models): freq ``<set>-wo_high``, ``<set>-wo_medium``,
``<set>-wo_high_medium``. The unablated ``pulse`` and ``rope`` are rerun beside them (same seeds, so each removal is
compared with its own baseline in one table). Both schedules (Algorithm 1's two stages; joint), ``--seeds`` seeds,
every other setting that of ``icl_two_stage.py`` (its ``OPTIONS`` and defaults).

Writes ``emergence_icl_bands_runs.csv`` (one row per run, the columns of ``emergence_icl_runs.csv``),
``emergence_icl_bands_summary.csv`` (``seed_summary``: mean, every seed's min / max, 95% t-interval over seeds) and
``emergence_icl_bands_pulse.csv`` (Assumption D.1's ``pulse_check`` of every set: ``C1``, ``eps_fn``, ``L``).

    python -m analyses.emergence.icl_band_removal [--seeds 3] [--tau 300] [--quick] [--out DIR]
"""

from __future__ import annotations

import time

import pandas as pd

from interp.experiments.trajectory import seed_summary
from interp.lab.icl_regression import BAND_REMOVALS, ICLData, frequencies, pulse_check

from analyses.emergence.icl_two_stage import RUN_KEYS, SETTINGS, parse, run


def sets(quick: bool) -> list[str]:
    """The frequency sets run: each base and its band removals (quick: ``rope`` and its removal of both bands)."""
    if quick:
        return ["rope", "rope-wo_high_medium"]
    return [f"{b}{r}" for b in ("pulse", "rope") for r in ("", *(f"-{x}" for x in BAND_REMOVALS))]


def main(argv: list[str] | None = None) -> pd.DataFrame:
    args = parse(__doc__, "K = 2, N_in = 4, 20 + 20 steps, one seed, rope and rope without high and medium (seconds)", argv)
    t0 = time.perf_counter()
    freqs = sets(args.quick)
    _, runs = run([(1, f, s, "reduced") for f in freqs for s in ("two-stage", "joint")], args)
    run_df = pd.DataFrame(runs)
    values = [c for c in run_df.columns if c not in (*RUN_KEYS, *SETTINGS)]
    data = ICLData(K=args.K, n_in=args.n_in, delta=1, d_c=2 * args.n_in + 2)
    pulses = pd.DataFrame([{"N": data.N, "d_c": data.d_c, "freq": f, **pulse_check(frequencies(f, data)[: data.d_c // 2], data.N)}
                           for f in freqs])
    run_df.to_csv(args.out / "emergence_icl_bands_runs.csv", index=False)
    seed_summary(run_df, RUN_KEYS, values).to_csv(args.out / "emergence_icl_bands_summary.csv", index=False)
    pulses.to_csv(args.out / "emergence_icl_bands_pulse.csv", index=False)
    print(run_df.groupby(["freq", "schedule"])[["lag_min_end", "lag1_mean_end", "t1_theory", "loss_end"]].mean().to_string(),
          flush=True)
    print(f"{len(runs)} runs in {time.perf_counter() - t0:.0f} s", flush=True)
    return run_df


if __name__ == "__main__":
    main()
