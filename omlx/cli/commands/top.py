"""`omlx top`: terminal dashboard of a running server (or plain-text frames with --batch)."""

from __future__ import annotations

import asyncio

import typer

from omlx.cli.output import fail
from omlx.settings import SettingsError, load_settings


def top(
    url: str = typer.Option("", help="Server base URL (default: the local server in settings)"),
    api_key: str = typer.Option("", help="API key (default: server.api_key from settings)"),
    batch: bool = typer.Option(False, "--batch", "-b", help="Print plain-text frames and exit"),
    iterations: int = typer.Option(
        1, "-n", "--iterations", min=0, help="Frames in batch mode (0 = until interrupted)"
    ),
    delay: float = typer.Option(2.0, "--delay", "-d", min=0.1, help="Seconds between frames"),
) -> None:
    """Watch a running server: throughput, latency, cache hits, memory, models, requests."""
    from omlx.tui.client import OmlxClient

    try:
        server = load_settings().settings.server
    except SettingsError as e:
        fail(str(e))
    host = "127.0.0.1" if server.host in ("0.0.0.0", "::", "") else server.host
    client = OmlxClient(url or f"http://{host}:{server.port}", api_key or server.api_key)
    if batch:
        from omlx.tui.batch import run_batch

        code = asyncio.run(run_batch(client, iterations, delay, lambda s: print(s, flush=True)))
        raise typer.Exit(code)
    from omlx.tui.app import TopApp

    TopApp(client).run()
