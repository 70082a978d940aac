"""`omlx completions`: print a shell completion script."""

from __future__ import annotations

from omlx.cli.output import not_available


def completions() -> None:
    """Print the completion script for bash, zsh or fish."""
    not_available("omlx completions", "issue 2")
