"""GET /api/stats (a StatsSnapshot) and GET /api/stats/stream (one snapshot per second, SSE)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import Any

from litestar import Request, get
from litestar.response import Stream

from omlx.schemas.stats import StatsSnapshot
from omlx.server.generation import pool_of
from omlx.server.sse import frame, sse_response


@get("/api/stats")
async def stats(request: Request[Any, Any, Any]) -> StatsSnapshot:
    return pool_of(request).stats()


@get("/api/stats/stream")
async def stats_stream(request: Request[Any, Any, Any]) -> Stream:
    pool = pool_of(request)
    interval_s: float = request.app.state["stats_interval_s"]

    async def frames() -> AsyncGenerator[bytes, None]:
        while True:
            yield frame(pool.stats())
            await asyncio.sleep(interval_s)

    return sse_response(frames())


ROUTES = [stats, stats_stream]
