"""Console helpers: only the CLI prints."""

from __future__ import annotations

import sys
from typing import NoReturn

import typer
from rich.console import Console

console = Console()
err_console = Console(stderr=True)


def fail(message: str, code: int = 1) -> NoReturn:
    # One line, never cut at the console's width: paths in it must stay whole when
    # stderr is a log or a pipe (Rich assumes 80 columns there).
    err_console.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def not_available(feature: str, issue: str) -> NoReturn:
    err_console.print(f"{feature} is not available yet ({issue}).", highlight=False, soft_wrap=True)
    sys.stderr.flush()
    raise typer.Exit(2)
