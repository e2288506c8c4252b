"""``interp view``: the token-level attention viewer (one offline HTML page). Options and outputs: ``interp view
--help``."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from interp.cli.common import DEVICE, DTYPE, MODEL, app, check_before_load, check_paths, console, fail
from interp.errors import InterpError


@app.command()
def view(
    model: str = MODEL,
    text: Optional[str] = typer.Option(None, help="the prompt"),
    file: Optional[Path] = typer.Option(None, help="read the prompt from this file (UTF-8 text)"),
    out: Path = typer.Option(Path("view.html"), help="the HTML file to write (a file, not a folder)"),
    layers: Optional[str] = typer.Option(None, help="layers to include, e.g. 0,3-5 (default all)"),
    heads: Optional[str] = typer.Option(None, help="heads to include, e.g. 2 or 0-3 (default all)"),
    window: int = typer.Option(512, min=1, help="tokens shown: queries and keys in [start, start + window)"),
    start: int = typer.Option(0, min=0, help="first token of the window"),
    device: str = DEVICE,
    dtype: str = DTYPE,
) -> None:
    """Token-level attention viewer: one offline HTML page (hover a token: where it looks, what looks at it)."""
    check_paths(out_file=out, files={"--file": file}, model=model)
    shape = check_before_load(model, device=device, dtype=dtype)

    from interp.report.viewer import parse_index_spec, view_command_main

    try:
        parse_index_spec(layers, "layer", shape and shape.n_layers, model)
        parse_index_spec(heads, "head", shape and shape.n_heads, model)
        path = view_command_main(model, text, file, out, layers, heads, window, start, device=device, dtype=dtype)
    except InterpError as err:
        fail(err)
    console.print(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB); open it in a browser, it works offline")
