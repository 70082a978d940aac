"""`omlx bench`: load-test a server across concurrency levels and prompt lengths."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import sys
from collections.abc import Iterator

import httpx
import typer
from rich.table import Table

from omlx.cli.commands.bench_progress import BenchProgress
from omlx.cli.output import console, err_console, fail
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


# Defaults sized for a CPU: against SmolLM2-135M on 2 cores the sweep takes about a
# minute (README: Commands); raise them on a GPU.
DEFAULT_CONCURRENCY = "1,4"
DEFAULT_PROMPT_WORDS = "64,512"
DEFAULT_MAX_TOKENS = 32


def bench(
    url: str = typer.Option("", help="Server base URL; default: start `omlx serve` here"),
    model: str = typer.Option("", help="Model to request (default: the server's first)"),
    concurrency: str = typer.Option(
        DEFAULT_CONCURRENCY, help="Concurrency levels, comma-separated"
    ),
    prompt_words: str = typer.Option(
        DEFAULT_PROMPT_WORDS, help="Prompt lengths (~tokens), comma-separated"
    ),
    max_tokens: int = typer.Option(DEFAULT_MAX_TOKENS, min=1, help="Tokens generated per request"),
    requests: int = typer.Option(0, min=0, help="Requests per level (default: 2 x concurrency)"),
    prompts: str = typer.Option(
        "",
        "--prompts",
        help='Real prompts instead of filler text: a JSON-lines file ({"prompt": ...}, or '
        "{\"messages\": [...]} whose last user turn is sent), or 'heldout' for the "
        "held-out prompts DFlash drafts are never trained on; --prompt-words is then ignored",
    ),
    api_key: str = typer.Option("", envvar="OMLX_SERVER__API_KEY", help="API key"),
    dflash: bool = typer.Option(False, "--dflash", help="Serve the model with its DFlash draft"),
    draft: str = typer.Option(
        "", help="With --dflash: the draft folder (default: draft.path, else 'random')"
    ),
    as_json: bool = typer.Option(
        False, "--json", help="Print one JSON document (and no progress on stderr)"
    ),
) -> None:
    """Measure TTFT, inter-token latency and tokens/s (per request and aggregate)."""
    levels = _ints(concurrency, "--concurrency")
    texts = _prompt_texts(prompts) if prompts else []
    lengths = [0] if texts else _ints(prompt_words, "--prompt-words")
    plan = [(c, n, requests or 2 * c) for n in lengths for c in levels]
    progress = BenchProgress(
        err_console, num_requests=sum(r for *_, r in plan), num_levels=len(plan), quiet=as_json
    )
    with progress, _target(url, model, dflash, draft, progress) as (base, served):
        model = served or model or _first_model(base, api_key)
        _warm_up(base, model, api_key, progress)
        results = _sweep(base, model, plan, max_tokens, api_key, progress, texts)
    if as_json:
        print(json.dumps({"url": base, "model": model, "levels": [r.to_dict() for r in results]}))
    else:
        console.print(_table(model, results))


@contextlib.contextmanager
def _target(
    url: str, model: str, dflash: bool, draft: str, progress: BenchProgress
) -> Iterator[tuple[str, str]]:
    """The server's URL, and the name it serves `model` under when bench started it
    (`--model` may be a folder; requests name models)."""
    if url:
        if dflash:
            fail("--dflash starts its own server; drop --url")
        yield url.rstrip("/"), ""
        return
    port = free_port()
    cmd = [sys.executable, "-m", "omlx.cli.main", "serve", "--port", str(port), "--preload"]
    if model:
        cmd += ["--model", model]
    if dflash:
        cmd += ["--dflash", *(["--draft", draft] if draft else [])]
    progress.phase(f"starting omlx serve on port {port} and loading the model")
    try:
        with server_process(cmd, port, ready_path="/ready") as base:
            yield base, httpx.get(f"{base}/ready", timeout=10).json()["default_model"]
    except (RuntimeError, TimeoutError) as e:
        fail(str(e))


def _prompt_texts(source: str) -> list[str]:
    """The user turns of a prompt file; 'heldout': the shipped held-out prompts, their
    categories interleaved so that a few requests see all of them."""
    from omlx.draft.train.prompts import read_prompt_file, select
    from omlx.errors import InvalidRequest

    try:
        records = read_prompt_file(None if source == "heldout" else source)
    except InvalidRequest as e:
        fail(str(e))
    if source == "heldout":
        by_category: dict[str, list[str]] = {}
        for r in select(records, split="heldout"):
            by_category.setdefault(r.category, []).append(r.text)
        return [t for group in itertools.zip_longest(*by_category.values()) for t in group if t]
    return [r.text for r in records]


def _first_model(base: str, api_key: str) -> str:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        data = httpx.get(f"{base}/v1/models", headers=headers, timeout=10).json()["data"]
    except (httpx.HTTPError, KeyError, ValueError) as e:
        fail(f"cannot list models at {base}: {e}")
    if not data:
        fail(f"{base} serves no models")
    return data[0]["id"]


def _warm_up(base: str, model: str, api_key: str, progress: BenchProgress) -> None:
    """One short request first, so that loading the model (a server given by --url may
    not have it loaded) is not measured as the first level's TTFT."""
    progress.phase(f"warming up {model} (loads it if the server has not)")
    result = asyncio.run(
        run_level(base, model, concurrency=1, num_requests=1, prompt_words=8, max_tokens=2,
                  api_key=api_key)
    )  # fmt: skip
    if result.num_failed:
        fail(f"the warm-up request to {base} failed: {'; '.join(result.errors)}")


def _sweep(
    base: str,
    model: str,
    plan: list[tuple[int, int, int]],
    max_tokens: int,
    api_key: str,
    progress: BenchProgress,
    texts: list[str],
) -> list[LevelResult]:
    results: list[LevelResult] = []
    for salt, (conc, words, num) in enumerate(plan):
        progress.level(conc, words, num)
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
                on_done=progress.request_done,
                prompts=texts,
            )
        )
        progress.level_done(result)
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
