"""Plain-text frames for `omlx top --batch` (like `top -b`)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from omlx.schemas.stats import StatsSnapshot
from omlx.tui.client import OmlxClient, ServerUnavailable
from omlx.tui.format import duration, human_bytes, ms, percent, rate


def render_frame(snap: StatsSnapshot) -> str:
    when = time.strftime("%H:%M:%S", time.localtime(snap.time))
    c, m = snap.cache, snap.memory
    lines = [
        f"omlx {snap.version} - {when} up {duration(snap.uptime_s)}  blas: {snap.blas or '-'}",
        f"requests: {snap.running} running, {snap.queued} queued, {snap.requests_total} total",
        f"throughput: generation {rate(snap.generation_tps)}, prompt {rate(snap.prompt_tps)}",
        f"cache: {'on' if c.enabled else 'off'}, hit rate "
        f"{percent(c.hits, c.hits + c.misses)}, tokens saved {c.hit_tokens}, "
        f"hot {c.hot.blocks} blocks {human_bytes(c.hot.bytes)}, "
        f"cold {c.cold.blocks} blocks {human_bytes(c.cold.bytes)}",
        f"memory: mlx active {human_bytes(m.mlx_active_bytes)}, peak "
        f"{human_bytes(m.mlx_peak_bytes)}, cache {human_bytes(m.mlx_cache_bytes)}, "
        f"rss {human_bytes(m.process_rss_bytes)}, budget {human_bytes(m.budget_bytes)}",
        "",
        f"{'MODEL':<32} {'TYPE':<9} {'STATE':<8} {'PIN':<4} {'RUN':>4} {'QUE':>4} "
        f"{'GEN TOK/S':>10} {'TTFT P50':>9} {'ITL P50':>8} {'MEM':>10}",
    ]
    for mod in snap.models:
        lines.append(
            f"{mod.model[:32]:<32} {mod.type:<9} {'loaded' if mod.loaded else 'idle':<8} "
            f"{'yes' if mod.pinned else '':<4} {mod.running:>4} {mod.queued:>4} "
            f"{mod.generation_tps:>10.1f} {ms(mod.ttft_ms.p50):>9} {ms(mod.itl_ms.p50):>8} "
            f"{human_bytes(mod.memory_bytes):>10}"
        )
    return "\n".join(lines)


async def run_batch(
    client: OmlxClient, iterations: int, delay_s: float, write: Callable[[str], None]
) -> int:
    """Print `iterations` frames `delay_s` apart (0 = until interrupted); returns an exit code."""
    done = 0
    try:
        while iterations <= 0 or done < iterations:
            if done:
                await asyncio.sleep(delay_s)
            try:
                snap = await client.snapshot()
            except ServerUnavailable as e:
                write(f"server unavailable: {e}")
                return 1
            write(render_frame(snap) + "\n")
            done += 1
    finally:
        await client.close()
    return 0
