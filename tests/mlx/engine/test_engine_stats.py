"""Pool stats: per-model counters, latency percentiles, memory, running requests."""

from __future__ import annotations

import asyncio

import msgspec
import pytest

from omlx.engine.api import Token
from omlx.pool.pool import LocalModelPool
from omlx.schemas.stats import CacheStats, StatsSnapshot
from omlx.settings import Settings
from tests.mlx.engine.engine_helpers import collect, request

pytestmark = pytest.mark.timeout(120)


def test_stats_snapshot_after_requests(tiny_dir):
    async def main():
        pool = LocalModelPool(
            Settings(), models={"tiny": tiny_dir}, cache_stats=lambda: CacheStats(enabled=True)
        )
        try:
            empty = pool.stats()
            await collect(pool, request("one", max_tokens=6))
            running = pool.generate(request("two", max_tokens=500))
            async for event in running:
                if isinstance(event, Token):
                    break
            during = pool.stats()
            await running.aclose()
            return empty, during
        finally:
            await pool.close(grace_s=0)

    empty, during = asyncio.run(main())
    assert empty.models == [] and empty.memory.process_rss_bytes > 0
    [m] = during.models
    assert m.model == "tiny" and m.requests_total == 2 and m.running == 1
    assert m.generation_tokens_total >= 7 and m.prompt_tokens_total > 0
    assert m.ttft_ms.p50 is not None and m.itl_ms.p50 is not None
    assert m.memory_bytes > 0 and during.memory.mlx_active_bytes > 0
    assert during.running == 1
    [live] = during.requests
    assert live.model == "tiny" and live.generated_tokens >= 1 and live.prompt_tokens > 0
    assert during.cache.enabled
    # The wire schema round-trips (the server and `omlx top` share it).
    assert msgspec.json.decode(msgspec.json.encode(during), type=StatsSnapshot) == during
