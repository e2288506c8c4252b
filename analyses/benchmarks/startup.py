"""Start-up time: ``import interp`` and ``interp --help`` against ``import torch`` in the same venv (issue 23).

Each command runs in a fresh subprocess ``--repeats`` times (default 5); the table keeps the minimum and the median
wall time in seconds. ``import interp`` loads nothing heavy until a name is used (PEP 562), so it should cost far less
than ``import torch``. Writes ``figures/startup.csv``.

    python -m analyses.benchmarks.startup [--repeats 5] [--quick]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from analyses._common import parse_tracked

ROOT = Path(__file__).resolve().parents[2]
FIG = ROOT / "figures"


def commands() -> dict[str, list[str]]:
    """What is timed: the name -> the argv of a fresh process."""
    exe = shutil.which("interp", path=str(Path(sys.executable).parent)) or "interp"
    return {"import torch": [sys.executable, "-c", "import torch"],
            "import interp": [sys.executable, "-c", "import interp"],
            "interp --help": [exe, "--help"]}


def main(argv: list[str] | None = None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="1 repeat, print only (the tests)")
    ap.add_argument("--out", type=Path, default=FIG)
    args = parse_tracked(ap, argv, __file__)
    import pandas as pd

    reps = 1 if args.quick else args.repeats
    rows = []
    for name, cmd in commands().items():
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            subprocess.run(cmd, check=True, capture_output=True, cwd=ROOT, env={**os.environ, "PYTHONWARNINGS": "ignore"})
            times.append(time.perf_counter() - t0)
        rows.append({"command": name, "min_s": round(min(times), 2), "median_s": round(statistics.median(times), 2), "repeats": reps})
    df = pd.DataFrame(rows)
    df["machine"] = f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    print(df.to_string(index=False))
    if not args.quick:
        args.out.mkdir(parents=True, exist_ok=True)
        df.to_csv(args.out / "startup.csv", index=False)
    return df


if __name__ == "__main__":
    main()
