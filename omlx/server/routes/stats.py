"""GET /api/stats (a StatsSnapshot) and GET /api/stats/stream (one snapshot per second, SSE)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import Any

from litestar import Request, get
from litestar.response import Stream

from omlx.schemas.stats import HttpStats, StatsSnapshot
from omlx.server.generation import pool_of
from omlx.server.openapi import documented
from omlx.server.request_log import HttpCounters
from omlx.server.sse import frame, sse_response


def snapshot(request: Request[Any, Any, Any]) -> StatsSnapshot:
    """The pool's figures plus what the HTTP server counted."""
    snap = pool_of(request).stats()
    counters: HttpCounters = request.app.state["http_counters"]
    snap.http = HttpStats(
        requests_total=counters.requests_total,
        client_disconnects_total=counters.client_disconnects_total,
        server_errors_total=counters.server_errors_total,
    )
    return snap


@get("/api/stats", operation_class=documented(returns=StatsSnapshot))
async def stats(request: Request[Any, Any, Any]) -> StatsSnapshot:
    return snapshot(request)


@get("/api/stats/stream", operation_class=documented(events=True))
async def stats_stream(request: Request[Any, Any, Any]) -> Stream:
    interval_s: float = request.app.state["stats_interval_s"]

    async def frames() -> AsyncGenerator[bytes, None]:
        while True:
            yield frame(snapshot(request))
            await asyncio.sleep(interval_s)

    return sse_response(frames())


ROUTES = [stats, stats_stream]
