"""The admin's smaller JSON endpoints: stats history, log tail, benchmark runs."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from litestar import Request, Response, delete, get, post
from litestar.params import Body

from omlx.errors import InvalidRequest
from omlx.schemas.admin import (
    BenchRequest,
    BenchRun,
    BenchRunSummary,
    JobStatus,
    LogTail,
    StatsHistory,
)
from omlx.server.admin import bench
from omlx.server.admin.core import admin_guard, admin_of, query_int


@get("/admin/api/history", guards=[admin_guard])
async def history(request: Request[Any, Any, Any]) -> StatsHistory:
    return admin_of(request).history.columns()


@get("/admin/api/logs", guards=[admin_guard])
async def logs(
    request: Request[Any, Any, Any],
) -> LogTail:
    q = request.query_params
    after, limit = query_int(q, "after", 0), query_int(q, "limit", 500)
    level = q.get("level", "INFO")
    return admin_of(request).logs.tail(after=after, level=level, limit=max(1, min(limit, 5000)))


def _self_url(request: Request[Any, Any, Any]) -> str:
    """This server, at the address the request reached it on (what a client would use)."""
    server = request.scope.get("server") or ("127.0.0.1", 8000)
    host, port = server[0], server[1]
    host = "127.0.0.1" if host in ("0.0.0.0", "") else host
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


@post("/admin/api/bench", guards=[admin_guard], status_code=202)
async def start_bench(
    request: Request[Any, Any, Any], data: Annotated[BenchRequest, Body()]
) -> JobStatus:
    admin = admin_of(request)
    bench.validate(data)
    if admin.jobs.running("bench"):
        raise InvalidRequest("a benchmark is already running; wait for it to finish")
    url = _self_url(request)
    title = f"{data.model} c={','.join(map(str, data.concurrency))}"
    return admin.jobs.start(
        "bench", title, lambda job: bench.run(job, data, url, admin.settings)
    ).status()


@get("/admin/api/bench/runs", guards=[admin_guard])
async def bench_runs() -> list[BenchRunSummary]:
    return bench.summaries()


@get("/admin/api/bench/runs/{run_id:str}", guards=[admin_guard])
async def bench_run(request: Request[Any, Any, Any]) -> Response[BenchRun]:
    run_id = request.path_params["run_id"]
    download = request.query_params.get("download") in ("1", "true")
    record = bench.load(run_id)
    headers = {"Content-Disposition": f'attachment; filename="omlx-bench-{run_id}.json"'}
    return Response(
        msgspec.json.format(msgspec.json.encode(record), indent=2),
        media_type="application/json",
        headers=headers if download else {},
    )


@delete("/admin/api/bench/runs/{run_id:str}", guards=[admin_guard], status_code=200)
async def delete_bench_run(request: Request[Any, Any, Any]) -> list[BenchRunSummary]:
    bench.delete(request.path_params["run_id"])
    return bench.summaries()


ROUTES = [history, logs, start_bench, bench_runs, bench_run, delete_bench_run]
