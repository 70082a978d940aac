"""`omlx config show|set`: the effective settings and where each value came from."""

from __future__ import annotations

import json

import typer
from rich.table import Table

from omlx.cli.output import console, fail
from omlx.models.default_model import DefaultChoice, choose_default_model
from omlx.settings import (
    SECRET_KEYS,
    LoadedSettings,
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
    default = _default_model(loaded)
    exists = loaded.path.is_file()
    if as_json:
        rows = {k: {"value": v, "source": loaded.sources[k]} for k, v in values.items()}
        print(
            json.dumps(
                {
                    "config_file": str(loaded.path),
                    "config_file_exists": exists,
                    "settings": rows,
                    "default_model": {"name": default.name, "origin": default.origin},
                    **extra,
                },
                indent=2,
            )
        )
        return
    title = f"omlx settings (file: {loaded.path}{'' if exists else ' (not present)'})"
    table = Table(title=title)
    for col in ("key", "value", "source", "env var", "description"):
        table.add_column(col)
    for key in all_keys():
        value, source = repr(values[key]), loaded.sources[key]
        if key == DEFAULT_MODEL_KEY and not values[key]:
            # Unset means "chosen at start": show what that choice is today.
            value, source = f"'' -> {default.name}", "auto"
        table.add_row(key, value, source, env_var(key), description(key))
    console.print(table)
    console.print(f"default model: {default.name} ({default.origin})", highlight=False)
    for k, v in extra.items():
        console.print(f"{k}: {v}")


DEFAULT_MODEL_KEY = "engine.default_model"


def _default_model(loaded: LoadedSettings) -> DefaultChoice:
    """What `omlx serve` would serve when a request names no model, without importing it."""
    from omlx.models.store import ModelStore

    store = ModelStore.from_settings(loaded.settings.models)
    configured = loaded.settings.engine.default_model
    return choose_default_model(store, configured, loaded.sources[DEFAULT_MODEL_KEY])


def _redact(key: str, value: object) -> object:
    # Secrets are never echoed back: show only whether one is set.
    if key in SECRET_KEYS and value:
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
