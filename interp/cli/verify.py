"""``interp verify``: recomputed attention against the model's own eager attention. Options and outputs: ``interp verify
--help``."""

from __future__ import annotations

import typer

from interp.cli.common import DTYPE, MODEL, app, check_paths, console, fail, show_table
from interp.errors import InterpError


@app.command()
def verify(model: str = MODEL, tokens: int = typer.Option(256, help="prompt length"),
           atol: float = typer.Option(1e-4), device: str = typer.Option("cpu", help="cpu | cuda | auto"), dtype: str = DTYPE) -> None:
    """Check that recomputed attention equals the model's eager attention on a pydoc prompt."""
    check_paths(model=model)

    from interp import corpus as corpus_mod
    from interp.hooks.capture import verify_attention
    from interp.models import load_model

    try:
        m = load_model(model, device=device, dtype=dtype)
        df = verify_attention(m, corpus_mod.prompts(m, "pydoc", 1, tokens)[0], atol=atol)
    except InterpError as err:
        fail(err)
    show_table(df, f"verify_attention on {m.card.name}, {tokens} tokens", list(df.columns), len(df))
    worst = df["max_abs_diff"].max()
    console.print(("[green]OK" if df.attrs["ok"] else "[red]FAILED") + f"[/]: max |recomputed - eager| = {worst:.3g} (atol {atol:g})")
    if not df.attrs["ok"]:
        raise typer.Exit(1)
