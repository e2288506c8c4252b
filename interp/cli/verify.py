"""``interp verify``: recomputed attention against the model's own eager attention. Options and outputs: ``interp verify
--help``."""

from __future__ import annotations

import typer

from interp.cli.common import DTYPE, MODEL, app, check_before_load, check_paths, console, fail, show_table, tokens_option
from interp.errors import InterpError


@app.command()
def verify(model: str = MODEL, tokens: int = tokens_option(256, "prompt length"),
           atol: float = typer.Option(1e-4, min=0.0, help="largest |recomputed - eager| that passes"), device: str = typer.Option("cpu", help="cpu | cuda | auto"), dtype: str = DTYPE) -> None:
    """Check that recomputed attention equals the model's eager attention on a pydoc prompt."""
    check_paths(model=model)
    check_before_load(model, device=device, dtype=dtype, tokens=tokens)

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
