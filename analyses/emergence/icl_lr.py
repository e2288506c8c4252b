"""How the App. D results depend on the learning rate: ``icl_two_stage.py``'s exact-pulse runs at offset one with
``eta1 = eta2`` in ``--lrs`` (default 0.3 and 3; ``icl_two_stage.py`` ran 1), Algorithm 1 and joint training.

Everything else as ``icl_two_stage.py`` (same data model, model, sizes, steps, seeds, evaluation batch, formation
levels and summaries; its functions are reused). The point: ``icl_two_stage.py`` uses the first learning rate tried;
this shows which of its conclusions (Stage I's speed, Stage II not reaching 0.9 within the budget, the order of the
stages under joint training) move with it.

Writes ``emergence_icl_lr_runs.csv`` (one row per run, the columns of ``emergence_icl_runs.csv``) and
``emergence_icl_lr_summary.csv`` (``seed_summary`` per ``lr`` and schedule).

    python -m analyses.emergence.icl_lr [--lrs 0.3 3] [--seeds 3] [--quick] [--out DIR]
"""

from __future__ import annotations

import time

import pandas as pd

from interp.experiments.trajectory import seed_summary
from interp.lab.icl_regression import ICLData, frequencies, train_icl

from analyses._common import one_thread, parser
from analyses.emergence.icl_two_stage import OPTIONS, QUICK, generalisation, run_summary


def main(argv: list[str] | None = None) -> pd.DataFrame:
    ap = parser(__doc__, "the quick sizes of icl_two_stage.py, one seed (seconds)")
    ap.add_argument("--lrs", type=float, nargs="+", default=[0.3, 3.0], help="eta1 = eta2 values")
    for flag, kind, default, text in OPTIONS:
        if flag != "--lr":
            ap.add_argument(flag, type=kind, default=default, help=text)
    args = ap.parse_args(argv)
    if args.quick:
        vars(args).update(QUICK)
    args.out.mkdir(parents=True, exist_ok=True)
    data = ICLData(K=args.K, n_in=args.n_in, delta=1, d_c=2 * args.n_in + 2)
    theta = frequencies("pulse", data)
    runs = []
    with one_thread():
        for lr in args.lrs:
            for sched in ("two-stage", "joint"):
                for seed in range(args.seeds):
                    t0 = time.perf_counter()
                    tr, model = train_icl(data, theta, schedule=sched, tau1=args.tau, tau2=args.tau, lr1=lr, lr2=lr,
                                          batch=args.batch, eval_batch=args.eval_batch, seed=seed)
                    runs.append({"lr": lr, "schedule": sched, "seed": seed, "N": data.N, "tau": args.tau,
                                 **run_summary(tr, data.N), **generalisation(model, data, seed, args.eval_batch),
                                 "seconds": time.perf_counter() - t0})
                    print(f"lr {lr} {sched} seed {seed}: t1 {runs[-1]['t1_theory']}, t2 {runs[-1]['t2_theory']}, "
                          f"feature mass {runs[-1]['feature_mass_end']:.3f}", flush=True)
    df = pd.DataFrame(runs)
    df.to_csv(args.out / "emergence_icl_lr_runs.csv", index=False)
    values = [c for c in df.columns if c not in ("lr", "schedule", "seed", "N", "tau")]
    seed_summary(df, ["lr", "schedule"], values).to_csv(args.out / "emergence_icl_lr_summary.csv", index=False)
    return df


if __name__ == "__main__":
    main()
