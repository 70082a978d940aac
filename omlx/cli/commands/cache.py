"""`omlx cache inspect|clear`: the tiered KV cache."""

from __future__ import annotations

import typer

from omlx.cli.output import not_available

app = typer.Typer(help="Inspect or clear the tiered block KV cache.", no_args_is_help=True)


@app.command("inspect")
def inspect() -> None:
    """Blocks, tokens and bytes per model and tier."""
    not_available("omlx cache inspect", "issue 5")


@app.command("clear")
def clear() -> None:
    """Drop cached blocks."""
    not_available("omlx cache clear", "issue 5")
