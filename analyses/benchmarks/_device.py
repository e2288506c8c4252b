"""What the studies sized for a lent GPU share (``device_check.sh`` steps ``rope_id_sink``, ``copy_finetune``): their
length factors and where they run.

    factors = length_factors(ap, args.factors, "the training length")
    if not pick_device(ap, args, "rope_id_sink"):
        return pd.DataFrame()  # full mode on a machine without CUDA: one line said so, nothing run
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch


def length_factors(ap: argparse.ArgumentParser, text: str, unit: str) -> list[int]:
    """``"1,2,4,8"`` -> ``[1, 2, 4, 8]``: test lengths as whole multiples of ``unit`` (named in the messages), 1 first,
    increasing. A bad list ends the run with one line (``ap.error``, exit code 2)."""
    try:
        factors = [int(f) for f in str(text).split(",")]
    except ValueError:
        ap.error(f"--factors {text}: give whole multiples of {unit}, e.g. 1,2,4,8")
    if factors[0] != 1 or sorted(set(factors)) != factors:
        ap.error(f"--factors {text}: start at 1 ({unit}) and increase")
    return factors


def pick_device(ap: argparse.ArgumentParser, args: argparse.Namespace, step: str) -> bool:
    """Resolve ``args.device``: ``auto`` becomes ``cuda`` where there is a GPU; without one, a study sized for a GPU
    prints one line (its ``device_check.sh`` step, ``--quick``, ``--device cpu``) and this returns False (nothing to
    run: ``make_all``'s full mode on a CPU machine). ``cuda`` on a machine without one ends the run with one line
    (``ap.error``). ``step``: the script's ``device_check.sh`` step, also its file name."""
    if args.device == "auto":
        if not torch.cuda.is_available():
            print(f"{step}.py is sized for a CUDA GPU (bash analyses/benchmarks/device_check.sh {step}); nothing run "
                  "(--quick checks the script on a CPU, --device cpu runs it here in hours)")
            return False
        args.device = "cuda"
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        ap.error(f"--device {args.device}: this machine has no CUDA GPU; use --device cpu")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    return True
