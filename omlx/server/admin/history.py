"""A bounded history of the stats snapshots, so the dashboard's charts survive a reload.

Sampled on the server (every `interval_s`, `window_s` long) whether or not a browser is
open; served column-wise, the shape the charts draw from. The dashboard derives the same
series from each live snapshot (static/js/dashboard.js `pointOf` mirrors `point_of`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from omlx.schemas.admin import StatsHistory
from omlx.schemas.stats import ModelStats, StatsSnapshot

log = logging.getLogger(__name__)

SERIES = (
    "running", "queued", "prompt_tps", "generation_tps",
    "ttft_p50_ms", "ttft_p95_ms", "itl_p50_ms", "itl_p95_ms",
    "mlx_active_bytes", "mlx_cache_bytes", "process_rss_bytes", "cache_hit_tokens",
)  # fmt: skip
MODEL_SERIES = ("running", "prompt_tps", "generation_tps")


def _worst(models: list[ModelStats], field: str, quantile: str) -> float | None:
    """The slowest loaded model's percentile: the number a person acts on."""
    values = [getattr(getattr(m, field), quantile) for m in models]
    values = [v for v in values if v is not None]
    return max(values) if values else None


def point_of(snap: StatsSnapshot) -> dict[str, float | None]:
    return {
        "running": snap.running,
        "queued": snap.queued,
        "prompt_tps": snap.prompt_tps,
        "generation_tps": snap.generation_tps,
        "ttft_p50_ms": _worst(snap.models, "ttft_ms", "p50"),
        "ttft_p95_ms": _worst(snap.models, "ttft_ms", "p95"),
        "itl_p50_ms": _worst(snap.models, "itl_ms", "p50"),
        "itl_p95_ms": _worst(snap.models, "itl_ms", "p95"),
        "mlx_active_bytes": snap.memory.mlx_active_bytes,
        "mlx_cache_bytes": snap.memory.mlx_cache_bytes,
        "process_rss_bytes": snap.memory.process_rss_bytes,
        "cache_hit_tokens": snap.cache.hit_tokens,
    }


@dataclass(slots=True)
class _Sample:
    time: float
    values: dict[str, float | None]
    models: dict[str, dict[str, float]]


class History:
    """A ring of samples; `run()` fills it until cancelled."""

    def __init__(
        self,
        snapshot: Callable[[], StatsSnapshot],
        interval_s: float = 1.0,
        window_s: float = 600.0,
    ) -> None:
        self.snapshot = snapshot
        self.interval_s = interval_s
        self.window_s = window_s
        self._samples: deque[_Sample] = deque(maxlen=max(2, int(window_s / interval_s)))

    def sample(self) -> None:
        snap = self.snapshot()
        models = {
            m.model: {name: float(getattr(m, name)) for name in MODEL_SERIES} for m in snap.models
        }
        self._samples.append(_Sample(snap.time, point_of(snap), models))

    async def run(self) -> None:
        while True:
            try:
                self.sample()
            except Exception:  # a failing snapshot must not end the history for good
                log.exception("stats history: sampling failed")
            await asyncio.sleep(self.interval_s)

    def columns(self) -> StatsHistory:
        samples = list(self._samples)
        names = sorted({name for s in samples for name in s.models})
        return StatsHistory(
            interval_s=self.interval_s,
            window_s=self.window_s,
            time=[s.time for s in samples],
            series={k: [s.values[k] for s in samples] for k in SERIES},
            models={
                name: {k: [s.models.get(name, {}).get(k) for s in samples] for k in MODEL_SERIES}
                for name in names
            },
        )


class Sampler:
    """Starts and stops the history's task with the app."""

    def __init__(self, history: History) -> None:
        self.history = history
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self.history.run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
