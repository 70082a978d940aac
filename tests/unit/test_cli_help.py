"""`omlx --version`, and `-h` as `--help` on every command and group."""

from __future__ import annotations

import pytest
import typer
from typer.testing import CliRunner

import omlx
from omlx.cli.main import app

runner = CliRunner()


def _command_paths(group: typer.Typer, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    paths = [prefix]
    for info in group.registered_commands:
        paths.append((*prefix, info.name))
    for sub in group.registered_groups:
        paths.extend(_command_paths(sub.typer_instance, (*prefix, sub.name)))
    return paths


def test_every_command_is_listed() -> None:
    paths = _command_paths(app)
    assert ("serve",) in paths and ("cache", "clear") in paths and ("config", "show") in paths


@pytest.mark.parametrize("path", _command_paths(app), ids=lambda p: " ".join(p) or "omlx")
def test_dash_h_is_help(path: tuple[str, ...]) -> None:
    long = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "120"})
    short = runner.invoke(app, [*path, "-h"], env={"COLUMNS": "120"})
    assert long.exit_code == 0, long.output
    assert short.exit_code == 0, short.output
    assert short.output == long.output
    assert "-h" in long.output  # the help names the short form too


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_version(flag: str) -> None:
    result = runner.invoke(app, [flag])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == f"omlx {omlx.__version__}"
