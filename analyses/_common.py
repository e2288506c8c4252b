"""What every analysis script shares: where figures go, the zoo models it runs on, saving a figure as HTML + PNG."""

from __future__ import annotations

import argparse
from contextlib import contextmanager
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go
import torch

ROOT = Path(__file__).resolve().parents[1]
FIGURES = ROOT / "figures"
MODELS = ["smollm2-135m", "gemma-3-270m", "qwen2.5-coder-0.5b"]


def save_figure(fig: go.Figure, out: Path, stem: str) -> str:
    """Write ``out/stem.html`` (plotly.js from its CDN) and ``out/stem.png``; returns what was written.

    PNG export needs kaleido and a Chromium (``pip install kaleido``; ``apt-get install chromium``); without them
    the HTML alone is written and a line says so.
    """
    fig.write_html(out / f"{stem}.html", include_plotlyjs="cdn")
    try:
        fig.write_image(out / f"{stem}.png", scale=1)
        return "png+html"
    except Exception as e:  # noqa: BLE001  the HTML is written either way
        print(f"PNG export of {stem} skipped ({str(e)[:200]}); wrote {stem}.html")
        return "html"


@contextmanager
def one_thread():
    """Small float64 ops on one thread: with two OpenMP threads each op can wait milliseconds for a busy core."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def installed(names: list[str]) -> list[str]:
    """The models of ``names`` this machine has (``interp.models.is_installed``: tiny models always), in order; one line
    names each other one, so a script run on a machine without the optional zoo models says what it left out."""
    from interp.models import is_installed

    have = [n for n in names if is_installed(n)]
    for n in names:
        if n not in have:
            print(f"{n}: not installed, skipped (`interp models` prints its install command)")
    return have


def replace_rows(old: pd.DataFrame, new: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """``old``'s rows whose ``keys`` values ``new`` does not have, then ``new``: runs made again replace their own rows
    in a committed table and every other row stays (scripts that fill their tables in pieces, by model or seed)."""
    have = old.set_index(keys).index.isin(new.set_index(keys).index)
    return pd.concat([old[~have], new], ignore_index=True)


def parser(doc: str, quick_help: str) -> argparse.ArgumentParser:
    """The options every analysis script takes: ``--models``, ``--quick`` (seconds, for the tests) and ``--out``."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=MODELS)
    ap.add_argument("--quick", action="store_true", help=quick_help)
    ap.add_argument("--out", type=Path, default=FIGURES)
    return ap
