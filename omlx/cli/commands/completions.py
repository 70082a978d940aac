"""`omlx completions`: print a shell completion script."""

from __future__ import annotations

from enum import StrEnum

import typer


class Shell(StrEnum):
    bash = "bash"
    zsh = "zsh"
    fish = "fish"


def completions(
    shell: Shell = typer.Argument(..., help="Target shell: bash, zsh or fish."),
) -> None:
    """Print the completion script for bash, zsh or fish.

    bash: `omlx completions bash > ~/.local/share/bash-completion/completions/omlx`;
    zsh: save as `_omlx` in a directory on $fpath; fish: save as
    `~/.config/fish/completions/omlx.fish`. The same scripts ship in completions/.
    """
    from omlx.cli.gen_completions import render

    print(render(shell.value), end="")
