"""The three zoo models side by side (issue 12's comparison figure): SDHs by lag and distributions over heads.

Scans each model (8 pydoc prompts x 1024 tokens) or loads saved scans (``--load MODEL=DIR``, a folder written by
``interp scan``), then writes ``figures/compare_zoo.csv`` (one row per model, layer, head),
``figures/compare_zoo_summary.csv`` (one row per model) and the figures ``compare_zoo_lags`` and
``compare_zoo_box`` (``interp.report.compare``; ``interp compare`` writes the interactive page).

    python analyses/compare_zoo.py [--models ...] [--load smollm2-135m=DIR ...] [--quick]
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
import interp  # noqa: E402
from _common import parser, save_figure  # noqa: E402
from interp.report.compare import box_figure, compare_table, sdh_lag_figure, summary  # noqa: E402


def main(argv: list[str] | None = None) -> pd.DataFrame:
    ap = parser(__doc__, "tiny-llama and tiny-qwen2, 2 prompts x 64 tokens")
    ap.add_argument("--load", nargs="*", default=[], help="MODEL=DIR: a saved scan (its DIR/state) instead of scanning")
    args = ap.parse_args(argv)
    loads = dict(x.split("=", 1) for x in args.load)
    models = ["tiny-llama", "tiny-qwen2"] if args.quick else [m for m in args.models if m in loads or interp.models.is_installed(m)]
    n, t = (2, 64) if args.quick else (8, 1024)
    results = []
    for name in models:
        if name in loads:
            results.append(interp.ScanResult.load(Path(loads[name]) / "state"))
            continue
        model = interp.load_model(name, device="cpu")
        results.append(interp.scan(model, interp.corpus.prompts(model, "random" if args.quick else "pydoc", n, t)))
    table = compare_table(results, models)
    s = summary(table)
    args.out.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.out / "compare_zoo.csv", index=False)
    s.to_csv(args.out / "compare_zoo_summary.csv", index=False)
    save_figure(sdh_lag_figure(s), args.out, "compare_zoo_lags")
    save_figure(box_figure(table), args.out, "compare_zoo_box")
    print(s.to_string(index=False))
    return s


if __name__ == "__main__":
    main()
