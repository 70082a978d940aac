"""`omlx cache inspect|clear`: the tiered KV cache, from a running server or the cold dir."""

from __future__ import annotations

import time
from typing import Annotated, Literal

import msgspec
import typer

from omlx.cli.output import console, fail

app = typer.Typer(help="Inspect or clear the tiered block KV cache.", no_args_is_help=True)

ModelOpt = Annotated[str | None, typer.Option("--model", "-m", help="Only this model (name)")]
Tier = Literal["hot", "cold", "all"]


def _settings():
    from omlx.settings import SettingsError, load_settings

    try:
        return load_settings().settings
    except SettingsError as e:
        fail(str(e))


def _server_url(settings) -> str:
    host = settings.server.host if settings.server.host not in ("0.0.0.0", "::") else "127.0.0.1"
    return f"http://{host}:{settings.server.port}"


def _ask_server(settings, method: str, path: str, params: dict) -> bytes | None:
    """The server's answer, or None when no omlx server answers (then we read the disk)."""
    import httpx

    headers = (
        {"Authorization": f"Bearer {settings.server.api_key}"} if settings.server.api_key else {}
    )
    try:
        r = httpx.request(method, _server_url(settings) + path, params=params, headers=headers,
                          timeout=2.0)  # fmt: skip
    except httpx.HTTPError:
        return None
    return r.content if r.status_code == 200 else None


@app.command("inspect")
def inspect(
    model: ModelOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON")] = False,
) -> None:
    """Blocks, tokens and bytes per model and tier, hit rate, oldest/newest, skipped files.

    Asks a running server (GET /api/cache/stats) for the hot tier and hit rates; without
    one, reads the cold directory.
    """
    from omlx.cache.prefix_cache import scan_report
    from omlx.schemas.cache import CacheReport

    settings = _settings()
    body = _ask_server(settings, "GET", "/api/cache/stats", {})
    try:
        report = msgspec.json.decode(body, type=CacheReport) if body else None
    except msgspec.DecodeError:
        report = None
    report = report or scan_report(settings.cache)
    if model:
        report.models = [m for m in report.models if model in (m.model, m.fingerprint)
                         or m.fingerprint.startswith(model)]  # fmt: skip
    if as_json:
        typer.echo(msgspec.json.encode(report).decode())
        return
    _print_report(report)


def _print_report(report) -> None:
    from rich.table import Table

    console.print(f"cache: [bold]{'on' if report.enabled else 'off'}[/], block size "
                  f"{report.block_size} tokens, cold dir {report.cold_dir} "
                  f"(from the {report.source})", highlight=False)  # fmt: skip
    table = Table("model", "tier", "blocks", "tokens", "bytes", "hit rate", "oldest", "newest")
    for m in report.models:
        rate = "-" if m.hit_rate is None else f"{m.hit_rate:.0%}"
        for tier in ("hot", "cold"):
            u = getattr(m, tier)
            table.add_row(m.model if tier == "hot" else "", tier, str(u.blocks), str(u.tokens),
                          _bytes(u.bytes), rate if tier == "hot" else "", _ago(u.oldest),
                          _ago(u.newest))  # fmt: skip
    if report.models:
        console.print(table)
    else:
        console.print("no cached blocks")
    console.print(f"skipped files: {report.skipped_files}", highlight=False)


@app.command("clear")
def clear(
    model: ModelOpt = None,
    tier: Annotated[str, typer.Option("--tier", help="hot, cold or all")] = "all",
) -> None:
    """Drop cached blocks (all models unless --model)."""
    from omlx.cache.prefix_cache import clear_cold_dir

    if tier not in ("hot", "cold", "all"):
        fail(f"--tier must be hot, cold or all, not {tier!r}")
    settings = _settings()
    params = {"tier": tier, **({"model": model} if model else {})}
    body = _ask_server(settings, "POST", "/api/cache/clear", params)
    if body is not None:
        console.print(f"server cleared {body.decode().strip()} blocks", highlight=False)
        return
    if tier == "hot":
        console.print("no running server: the hot tier lives in a server's RAM; nothing to clear")
        return
    num = clear_cold_dir(settings.cache, model)
    console.print(f"removed {num} cold block files", highlight=False)


def _bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _ago(t: float | None) -> str:
    if t is None:
        return "-"
    s = max(0.0, time.time() - t)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size:
            return f"{s / size:.0f}{unit} ago"
    return f"{s:.0f}s ago"
