"""Console helpers: only the CLI prints."""

from __future__ import annotations

import sys
from typing import NoReturn

import typer
from rich.console import Console

console = Console()
err_console = Console(stderr=True)


def fail(message: str, code: int = 1) -> NoReturn:
    err_console.print(f"[bold red]error:[/] {message}", highlight=False)
    raise typer.Exit(code)


def not_available(feature: str, issue: str) -> NoReturn:
    err_console.print(f"{feature} is not available yet ({issue}).", highlight=False)
    sys.stderr.flush()
    raise typer.Exit(2)
