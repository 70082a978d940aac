"""`omlx models`, `omlx pin`, `omlx unpin`."""

from __future__ import annotations

import json

import typer
from rich.table import Table

from omlx.cli.output import console, fail
from omlx.errors import ModelNotFound
from omlx.models.store import ModelEntry, ModelStore
from omlx.settings import ModelSettings, SettingsError, load_settings, update_list


def model_settings() -> ModelSettings:
    try:
        return load_settings().settings.models
    except SettingsError as e:
        fail(str(e))


def open_store() -> ModelStore:
    """The store as the settings describe it; bad settings end the command cleanly."""
    return ModelStore.from_settings(model_settings())


def _update_pins(name: str, *, add: bool) -> list[str]:
    try:
        return update_list("models.pinned", name, add=add)
    except SettingsError as e:
        fail(str(e))


def list_models(
    as_json: bool = typer.Option(False, "--json", help="Print JSON for scripts."),
) -> None:
    """List the models in the store: $OMLX_HOME/models, models.dirs and the HF cache."""
    entries = open_store().list()
    if as_json:
        print(json.dumps([e.to_dict() for e in entries], indent=2))
        return
    if not entries:
        console.print("No models yet. Add one with `omlx pull ORG/NAME`, a folder or a .gguf.")
        return
    table = Table(title="omlx models")
    for col in ("name", "type", "architecture", "params", "size", "quant", "pinned", "path"):
        table.add_column(col, overflow="fold")
    for e in entries:
        table.add_row(*_row(e))
    console.print(table)


def _row(e: ModelEntry) -> list[str]:
    return [
        e.name,
        e.type.value,
        e.architecture,
        human_count(e.num_params),
        human_bytes(e.size_bytes),
        e.quantization or "-",
        "yes" if e.pinned else "",
        str(e.path),
    ]


def human_count(n: int | None) -> str:
    if n is None:
        return "-"
    for unit, scale in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f}{unit}"
    return str(n)


def human_bytes(n: int) -> str:
    value = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GB"


def pin(name: str = typer.Argument(..., help="Model name as `omlx models` shows it.")) -> None:
    """Pin a model: the pool never unloads it automatically (settings models.pinned)."""
    try:
        entry = open_store().resolve(name)
    except ModelNotFound as e:
        fail(e.message)
    pinned = _update_pins(entry.name, add=True)
    console.print(f"pinned {entry.name} (pinned: {', '.join(pinned)})")
    _tell_running_server(entry.name, pinned=True)


def unpin(name: str = typer.Argument(..., help="A pinned model's name.")) -> None:
    """Unpin a model: the pool may unload it again when memory is needed or it idles."""
    current = model_settings().pinned
    target = name
    if name not in current:
        # Accept any spelling the store resolves, but only act on a name that is pinned.
        try:
            target = open_store().resolve(name).name
        except ModelNotFound as e:
            fail(e.message)
        if target not in current:
            fail(f"{target} is not pinned (pinned: {', '.join(current) or 'none'})")
    pinned = _update_pins(target, add=False)
    console.print(f"unpinned {target} (pinned: {', '.join(pinned) or 'none'})")
    _tell_running_server(target, pinned=False)


def _tell_running_server(name: str, *, pinned: bool) -> None:
    """POST /v1/models/{name}/pin|unpin to the server the settings describe, if one runs.

    The settings file already changed, so a server that is not running (or refuses)
    picks the pin up at its next start: nothing to report but a note.
    """
    import httpx

    try:
        server = load_settings().settings.server
    except SettingsError:
        return
    host = "127.0.0.1" if server.host in ("0.0.0.0", "::", "") else server.host
    action = "pin" if pinned else "unpin"
    headers = {"Authorization": f"Bearer {server.api_key}"} if server.api_key else {}
    try:
        resp = httpx.post(
            f"http://{host}:{server.port}/v1/models/{name}/{action}", headers=headers, timeout=2.0
        )
    except httpx.HTTPError:
        return  # no server running: the setting applies at the next `omlx serve`
    if resp.status_code < 300:
        console.print(f"the running server at {host}:{server.port} applied the {action}")
