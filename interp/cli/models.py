"""``interp models``: list the model zoo, whether each model is installed, and how to install it. Options and outputs:
``interp models --help``."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from interp.cli.common import app, console


@app.command()
def models() -> None:
    """List the model zoo, whether each model is installed, and how to install it."""
    from interp.models import zoo_table

    rows = zoo_table()
    table = Table(title="interp model zoo (offline)")
    table.add_column("name", no_wrap=True, min_width=max(len(r["name"]) for r in rows))
    table.add_column("installed", no_wrap=True)
    table.add_column("description", overflow="fold")
    for r in rows:
        table.add_row(escape(r["name"]), r["installed"], escape(r["description"]))
    console.print(table)
    missing = [r for r in rows if r["install"]]
    if missing:  # whole lines, never cut or wrapped by the table, and not read as markup ('.[gemma]')
        console.print("To install a missing model, run in the interp checkout:")
        for r in missing:
            console.print(f"  {r['name']}: {r['install']}", markup=False, highlight=False, soft_wrap=True)
