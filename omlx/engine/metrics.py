"""Per-model serving metrics (pure Python): written by the engine thread, read by stats()."""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field

from omlx.schemas.stats import ModelStats, Percentiles, RunningRequest

WINDOW_S = 5.0  # tokens/s are averaged over this many recent seconds
MAX_LATENCY_SAMPLES = 2048


@dataclass(slots=True)
class _Live:
    prompt_tokens: int
    started_at: float
    generated_tokens: int = 0
    served_by: str = "batch"


def percentiles(samples: list[float]) -> Percentiles:
    if not samples:
        return Percentiles()
    s = sorted(samples)

    def at(q: float) -> float:
        return s[min(len(s) - 1, int(q * len(s)))]

    return Percentiles(p50=at(0.5), p90=at(0.9), p95=at(0.95), p99=at(0.99))


@dataclass(slots=True)
class EngineMetrics:
    """Counters, sliding windows and latency samples of one engine; one lock."""

    model: str
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _live: dict[str, _Live] = field(default_factory=dict)
    _prompt_events: deque[tuple[float, int]] = field(default_factory=deque)
    _gen_events: deque[tuple[float, int]] = field(default_factory=deque)
    _ttft_ms: deque[float] = field(default_factory=lambda: deque(maxlen=MAX_LATENCY_SAMPLES))
    _itl_ms: deque[float] = field(default_factory=lambda: deque(maxlen=MAX_LATENCY_SAMPLES))
    queued: int = 0
    requests_total: int = 0
    prompt_tokens_total: int = 0
    generation_tokens_total: int = 0
    cached_tokens_total: int = 0
    memory: dict[str, int] = field(default_factory=dict)

    def started(
        self, request_id: str, prompt_tokens: int, cached_tokens: int, served_by: str = "batch"
    ) -> None:
        with self._lock:
            self._live[request_id] = _Live(prompt_tokens, time.monotonic(), served_by=served_by)
            self.requests_total += 1
            self.cached_tokens_total += cached_tokens

    def prefilled(self, num_tokens: int) -> None:
        if num_tokens <= 0:
            return
        with self._lock:
            self.prompt_tokens_total += num_tokens
            self._prompt_events.append((time.monotonic(), num_tokens))

    def generated(self, request_id: str, num_tokens: int, latency_s: float, is_first: bool) -> None:
        with self._lock:
            live = self._live.get(request_id)
            if live is not None:
                live.generated_tokens += num_tokens
            self.generation_tokens_total += num_tokens
            self._gen_events.append((time.monotonic(), num_tokens))
            (self._ttft_ms if is_first else self._itl_ms).append(latency_s * 1000.0)

    def finished(self, request_id: str) -> None:
        with self._lock:
            self._live.pop(request_id, None)

    def set_queued(self, queued: int) -> None:
        self.queued = queued  # a plain int store: atomic under the GIL

    def snapshot(
        self, *, loaded: bool = True, pinned: bool = False, model_type: str = "llm"
    ) -> tuple[ModelStats, list[RunningRequest]]:
        now = time.monotonic()
        with self._lock:
            prompt_tps = _rate(self._prompt_events, now)
            gen_tps = _rate(self._gen_events, now)
            running = [
                RunningRequest(
                    request_id=rid,
                    model=self.model,
                    age_s=now - r.started_at,
                    prompt_tokens=r.prompt_tokens,
                    generated_tokens=r.generated_tokens,
                    tokens_per_s=r.generated_tokens / max(now - r.started_at, 1e-6),
                    served_by=r.served_by,
                )
                for rid, r in self._live.items()
            ]
            stats = ModelStats(
                model=self.model,
                type=model_type,
                loaded=loaded,
                pinned=pinned,
                memory_bytes=self.memory.get("model_bytes", 0),
                running=len(running),
                queued=self.queued,
                requests_total=self.requests_total,
                prompt_tokens_total=self.prompt_tokens_total,
                generation_tokens_total=self.generation_tokens_total,
                prompt_tps=prompt_tps,
                generation_tps=gen_tps,
                ttft_ms=percentiles(list(self._ttft_ms)),
                itl_ms=percentiles(list(self._itl_ms)),
                cached_tokens_total=self.cached_tokens_total,
            )
        return stats, running


def _rate(events: deque[tuple[float, int]], now: float) -> float:
    while events and events[0][0] < now - WINDOW_S:
        events.popleft()
    return sum(n for _, n in events) / WINDOW_S
