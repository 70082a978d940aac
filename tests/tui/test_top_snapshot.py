"""A snapshot of `omlx top`'s main screen at 80x24, fed a fixed stats frame."""

from __future__ import annotations

from collections.abc import AsyncIterator

from omlx.schemas.stats import (
    CacheStats,
    CacheTierStats,
    MemoryStats,
    ModelStats,
    Percentiles,
    RunningRequest,
    StatsSnapshot,
)
from omlx.tui.app import TopApp
from omlx.tui.client import OmlxClient

FRAME = StatsSnapshot(
    time=1_796_236_800.0,
    uptime_s=3725.0,
    version="0.1.0",
    blas="OpenBLAS 0.3.31",
    running=2,
    queued=1,
    prompt_tps=812.5,
    generation_tps=96.4,
    requests_total=42,
    models=[
        ModelStats(
            model="SmolLM2-135M-Instruct",
            running=2,
            queued=1,
            pinned=True,
            generation_tps=96.4,
            memory_bytes=540_000_000,
            ttft_ms=Percentiles(p50=120.0, p90=300.0, p99=450.0),
            itl_ms=Percentiles(p50=31.0, p90=40.0, p99=55.0),
        ),
        ModelStats(model="all-MiniLM-L6-v2", type="embedding", loaded=False, ttl_left_s=290.0),
    ],
    requests=[
        RunningRequest(
            request_id="chatcmpl-0123456789abcdef",
            model="SmolLM2-135M-Instruct",
            age_s=4.2,
            prompt_tokens=812,
            generated_tokens=77,
            tokens_per_s=33.1,
        )
    ],
    memory=MemoryStats(
        mlx_active_bytes=600_000_000,
        mlx_peak_bytes=900_000_000,
        mlx_cache_bytes=100_000_000,
        process_rss_bytes=1_200_000_000,
        budget_bytes=18_000_000_000,
    ),
    cache=CacheStats(
        enabled=True,
        hits=30,
        misses=12,
        hit_tokens=24_576,
        hot=CacheTierStats(blocks=40, tokens=10_240, bytes=300_000_000),
        cold=CacheTierStats(blocks=200, tokens=51_200, bytes=1_500_000_000),
    ),
)


class OneFrameClient(OmlxClient):
    """Serves FRAME once, then nothing: the screen stays still for the snapshot."""

    async def stream(self) -> AsyncIterator[StatsSnapshot]:
        yield FRAME
        await self._never()

    async def _never(self) -> None:
        import asyncio

        await asyncio.Event().wait()


def test_main_screen_snapshot(snap_compare) -> None:
    app = TopApp(OneFrameClient("http://127.0.0.1:9"))
    assert snap_compare(app, terminal_size=(80, 24), run_before=_settle)


async def _settle(pilot) -> None:
    await pilot.pause(0.3)
