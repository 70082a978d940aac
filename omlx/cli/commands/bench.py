"""`omlx bench`: load-test a server across concurrency levels and prompt lengths."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import Iterator

import httpx
import typer
from rich.progress import Progress
from rich.table import Table

from omlx.cli.output import console, fail
from omlx.loadgen.scenarios import LevelResult, run_level
from omlx.loadgen.server_process import free_port, server_process


def _ints(text: str, flag: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        fail(f"{flag} takes comma-separated integers, got {text!r}")
    if not values or min(values) < 1:
        fail(f"{flag} needs positive integers, got {text!r}")
    return values


def bench(
    url: str = typer.Option("", help="Server base URL; default: start `omlx serve` here"),
    model: str = typer.Option("", help="Model to request (default: the server's first)"),
    concurrency: str = typer.Option("1,4,8,16", help="Concurrency levels, comma-separated"),
    prompt_words: str = typer.Option("64,512", help="Prompt lengths (~tokens), comma-separated"),
    max_tokens: int = typer.Option(64, min=1, help="Tokens generated per request"),
    requests: int = typer.Option(0, min=0, help="Requests per level (default: 2 x concurrency)"),
    api_key: str = typer.Option("", envvar="OMLX_SERVER__API_KEY", help="API key"),
    dflash: bool = typer.Option(False, "--dflash", help="Serve the model with its DFlash draft"),
    draft: str = typer.Option(
        "", help="With --dflash: the draft folder (default: draft.path, else 'random')"
    ),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON document"),
) -> None:
    """Measure TTFT, inter-token latency and tokens/s (per request and aggregate)."""
    levels = _ints(concurrency, "--concurrency")
    lengths = _ints(prompt_words, "--prompt-words")
    with _target(url, model, dflash, draft) as base:
        model = model or _first_model(base, api_key)
        results = _sweep(base, model, levels, lengths, max_tokens, requests, api_key, as_json)
    if as_json:
        print(json.dumps({"url": base, "model": model, "levels": [r.to_dict() for r in results]}))
    else:
        console.print(_table(model, results))


@contextlib.contextmanager
def _target(url: str, model: str, dflash: bool, draft: str) -> Iterator[str]:
    if url:
        if dflash:
            fail("--dflash starts its own server; drop --url")
        yield url.rstrip("/")
        return
    port = free_port()
    cmd = [sys.executable, "-m", "omlx.cli.main", "serve", "--port", str(port)]
    if model:
        cmd += ["--model", model]
    if dflash:
        cmd += ["--dflash", *(["--draft", draft] if draft else [])]
    console.print(f"starting {' '.join(cmd[2:])} ...", style="dim")
    try:
        with server_process(cmd, port) as base:
            yield base
    except (RuntimeError, TimeoutError) as e:
        fail(str(e))


def _first_model(base: str, api_key: str) -> str:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        data = httpx.get(f"{base}/v1/models", headers=headers, timeout=10).json()["data"]
    except (httpx.HTTPError, KeyError, ValueError) as e:
        fail(f"cannot list models at {base}: {e}")
    if not data:
        fail(f"{base} serves no models")
    return data[0]["id"]


def _sweep(
    base: str,
    model: str,
    levels: list[int],
    lengths: list[int],
    max_tokens: int,
    requests: int,
    api_key: str,
    quiet: bool,
) -> list[LevelResult]:
    plan = [(c, n, requests or 2 * c) for n in lengths for c in levels]
    results: list[LevelResult] = []
    with Progress(console=console, transient=True, disable=quiet) as progress:
        task = progress.add_task("benchmark", total=sum(r for _, _, r in plan))
        for salt, (conc, words, num) in enumerate(plan):
            progress.update(task, description=f"c={conc} prompt~{words}")
            result = asyncio.run(
                run_level(
                    base,
                    model,
                    concurrency=conc,
                    num_requests=num,
                    prompt_words=words,
                    max_tokens=max_tokens,
                    api_key=api_key,
                    salt=salt + 1,
                    on_done=lambda: progress.advance(task),
                )
            )
            results.append(result)
    return results


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.0f}"


def _table(model: str, results: list[LevelResult]) -> Table:
    table = Table(title=f"omlx bench: {model}")
    for col in (
        "conc",
        "prompt tok",
        "reqs",
        "failed",
        "agg tok/s",
        "req tok/s",
        "TTFT p50 ms",
        "TTFT p95 ms",
        "ITL p50 ms",
        "ITL p95 ms",
    ):
        table.add_column(col, justify="right")
    for r in results:
        table.add_row(
            str(r.concurrency),
            str(r.prompt_tokens or r.prompt_words),
            str(r.num_requests),
            str(r.num_failed),
            f"{r.aggregate_tps:.1f}",
            f"{r.per_request_tps:.1f}",
            _ms(r.ttft_p50_s),
            _ms(r.ttft_p95_s),
            "-" if r.itl_p50_ms is None else f"{r.itl_p50_ms:.1f}",
            "-" if r.itl_p95_ms is None else f"{r.itl_p95_ms:.1f}",
        )
    return table
