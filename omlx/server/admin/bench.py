"""Benchmarks from the admin: `omlx bench`'s load generator, runs kept under OMLX_HOME.

The load generator (omlx.loadgen) runs in a job's thread on an event loop of its own, so
its client work does not share the server's loop with the requests it measures. It
targets this server through the address the browser's request arrived on; with DFlash
on, it starts `omlx serve --dflash` on a free port as `omlx bench --dflash` does.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import secrets
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import msgspec

from omlx.errors import InvalidRequest, NotFound
from omlx.loadgen.scenarios import run_level
from omlx.loadgen.server_process import free_port, server_process
from omlx.schemas.admin import BenchRequest, BenchRun, BenchRunSummary
from omlx.server.admin.jobs import Job
from omlx.settings import Settings, omlx_home

MAX_CONCURRENCY = 256
MAX_PROMPT_WORDS = 32_768
MAX_TOKENS = 8192
MAX_REQUESTS = 2000  # over the whole run
RUN_ID_RE = re.compile(r"^[0-9]{8}-[0-9]{6}-[0-9a-f]{6}$")


def bench_dir() -> Path:
    return omlx_home() / "bench"


def validate(req: BenchRequest) -> list[tuple[int, int, int]]:
    """The run's levels as (concurrency, prompt words, requests); InvalidRequest if too big."""
    if not req.model:
        raise InvalidRequest("choose a model", param="model")
    if not req.concurrency or not all(1 <= c <= MAX_CONCURRENCY for c in req.concurrency):
        raise InvalidRequest(f"concurrency levels: 1 to {MAX_CONCURRENCY}", param="concurrency")
    if not req.prompt_words or not all(1 <= n <= MAX_PROMPT_WORDS for n in req.prompt_words):
        raise InvalidRequest(f"prompt lengths: 1 to {MAX_PROMPT_WORDS}", param="prompt_words")
    if not 1 <= req.max_tokens <= MAX_TOKENS:
        raise InvalidRequest(f"max tokens: 1 to {MAX_TOKENS}", param="max_tokens")
    if req.requests < 0:
        raise InvalidRequest("requests per level: 0 (2 x concurrency) or more", param="requests")
    plan = [(c, n, req.requests or 2 * c) for n in req.prompt_words for c in req.concurrency]
    if sum(r for _, _, r in plan) > MAX_REQUESTS:
        raise InvalidRequest(f"at most {MAX_REQUESTS} requests per run", param="requests")
    return plan


def run(job: Job, req: BenchRequest, base_url: str, settings: Settings) -> dict:
    """The job's work: every level in turn, the run saved after each one."""
    plan = validate(req)
    started = time.time()
    run_id = time.strftime("%Y%m%d-%H%M%S", time.localtime(started)) + "-" + secrets.token_hex(3)
    total = sum(r for _, _, r in plan)
    done = 0

    def advance() -> None:
        nonlocal done
        done += 1
        job.update(progress=done / total, detail={"requests_done": done, "requests": total})

    record = BenchRun(id=run_id, started=started, model=req.model, request=req, target="")
    job.update(detail={"run_id": run_id, "requests": total, "requests_done": 0})
    with _target(req, base_url, settings) as (url, target):
        record.target = target
        _warm_up(job, url, req.model, settings.server.api_key)
        for salt, (conc, words, num) in enumerate(plan):
            job.update(message=f"c={conc} prompt~{words}", detail={"level": salt + 1})
            result = asyncio.run(
                run_level(
                    url, req.model, concurrency=conc, num_requests=num, prompt_words=words,
                    max_tokens=req.max_tokens, api_key=settings.server.api_key,
                    salt=salt + 1, on_done=advance,
                )
            )  # fmt: skip
            record.levels.append(result.to_dict())
            job.update(detail={"levels": record.levels})
            save(record)
    record.finished = time.time()
    save(record)
    return msgspec.to_builtins(record)


def _warm_up(job: Job, url: str, model: str, api_key: str) -> None:
    """One short request first, as `omlx bench` does: loading the model is not measured as
    the first level's TTFT."""
    job.update(message="warm-up")
    result = asyncio.run(
        run_level(url, model, concurrency=1, num_requests=1, prompt_words=8, max_tokens=2,
                  api_key=api_key)
    )  # fmt: skip
    if result.num_failed:
        raise InvalidRequest(f"the warm-up request failed: {'; '.join(result.errors)}")


@contextlib.contextmanager
def _target(req: BenchRequest, base_url: str, settings: Settings) -> Iterator[tuple[str, str]]:
    if not req.dflash:
        yield base_url, "this server"
        return
    port = free_port()
    cmd = [sys.executable, "-m", "omlx.cli.main", "serve", "--port", str(port),
           "--host", "127.0.0.1", "--model", req.model, "--dflash", "--preload"]  # fmt: skip
    if settings.draft.path:
        cmd += ["--draft", settings.draft.path]
    try:
        with server_process(cmd, port, ready_path="/ready") as url:
            yield url, f"omlx serve --dflash on port {port}"
    except (RuntimeError, TimeoutError) as e:
        raise InvalidRequest(f"the DFlash server did not start: {e}") from None


def save(record: BenchRun) -> None:
    folder = bench_dir()
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f"{record.id}.json.tmp"
    tmp.write_bytes(msgspec.json.format(msgspec.json.encode(record), indent=2))
    tmp.replace(folder / f"{record.id}.json")


def load(run_id: str) -> BenchRun:
    if not RUN_ID_RE.match(run_id):
        raise NotFound(f"no benchmark run {run_id!r}", param="run_id")
    path = bench_dir() / f"{run_id}.json"
    try:
        return msgspec.json.decode(path.read_bytes(), type=BenchRun)
    except FileNotFoundError:
        raise NotFound(f"no benchmark run {run_id!r}", param="run_id") from None


def summaries(limit: int = 100) -> list[BenchRunSummary]:
    out = []
    for path in sorted(bench_dir().glob("*.json"), reverse=True)[:limit]:
        try:
            r = msgspec.json.decode(path.read_bytes(), type=BenchRun)
        except (msgspec.DecodeError, OSError, json.JSONDecodeError):
            continue  # a file from elsewhere or cut short: not a run
        rates = [lv.get("aggregate_tps") or 0.0 for lv in r.levels]
        out.append(
            BenchRunSummary(
                id=r.id, started=r.started, model=r.model, levels=len(r.levels),
                dflash=r.request.dflash, best_tps=max(rates) if rates else None,
            )
        )  # fmt: skip
    return out


def delete(run_id: str) -> None:
    load(run_id)
    (bench_dir() / f"{run_id}.json").unlink(missing_ok=True)
