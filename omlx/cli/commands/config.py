"""`omlx config show|set`: the effective settings and where each value came from."""

from __future__ import annotations

import json

import typer
from rich.table import Table

from omlx.cli.output import console, fail
from omlx.settings import (
    SettingsError,
    all_keys,
    description,
    env_var,
    flatten,
    load_settings,
    set_value,
)

app = typer.Typer(help="Show or edit settings ($OMLX_HOME/config.toml).", no_args_is_help=True)


@app.command("show")
def show(
    as_json: bool = typer.Option(False, "--json", help="Print JSON for scripts."),
) -> None:
    """Print the effective settings and the source of each value."""
    try:
        loaded = load_settings()
    except SettingsError as e:
        fail(str(e))
    values = {k: _redact(k, v) for k, v in flatten(loaded.settings).items()}
    extra = _runtime_facts()
    if as_json:
        rows = {k: {"value": v, "source": loaded.sources[k]} for k, v in values.items()}
        print(json.dumps({"config_file": str(loaded.path), "settings": rows, **extra}, indent=2))
        return
    table = Table(title=f"omlx settings (file: {loaded.path})")
    for col in ("key", "value", "source", "env var", "description"):
        table.add_column(col)
    for key in all_keys():
        table.add_row(key, repr(values[key]), loaded.sources[key], env_var(key), description(key))
    console.print(table)
    for k, v in extra.items():
        console.print(f"{k}: {v}")


def _redact(key: str, value: object) -> object:
    # Secrets are never echoed back: show only whether one is set.
    if key.endswith("api_key") and value:
        return "<set>"
    return value


def _runtime_facts() -> dict[str, str]:
    """Facts about this process that are not settings (the BLAS MLX runs on, say)."""
    try:
        from omlx.platform.blas import blas_description
    except ImportError:
        return {}
    return {"blas": blas_description()}


@app.command("set")
def set_(
    key: str = typer.Argument(..., help="SECTION.FIELD, e.g. server.port"),
    value: str = typer.Argument(..., help="The new value (lists: comma-separated or JSON)"),
) -> None:
    """Validate VALUE and write it to the config file."""
    try:
        typed = set_value(key, value)
    except SettingsError as e:
        fail(str(e))
    console.print(f"{key} = {_redact(key, typed)!r}")
