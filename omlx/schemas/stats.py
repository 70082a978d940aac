"""Wire schemas of /api/stats and /api/stats/stream, shared by the server and `omlx top`."""

from __future__ import annotations

import msgspec


class Percentiles(msgspec.Struct, kw_only=True):
    p50: float | None = None
    p90: float | None = None
    p95: float | None = None
    p99: float | None = None


class MemoryStats(msgspec.Struct, kw_only=True):
    mlx_active_bytes: int = 0
    mlx_peak_bytes: int = 0
    mlx_cache_bytes: int = 0
    process_rss_bytes: int = 0
    budget_bytes: int | None = None


class CacheTierStats(msgspec.Struct, kw_only=True):
    blocks: int = 0
    tokens: int = 0
    bytes: int = 0


class CacheStats(msgspec.Struct, kw_only=True):
    enabled: bool = False
    hits: int = 0
    misses: int = 0
    hit_tokens: int = 0  # prompt tokens served from the cache (tokens saved)
    cold_hit_tokens: int = 0  # of hit_tokens, those read back from the cold tier (SSD)
    hot: CacheTierStats = msgspec.field(default_factory=CacheTierStats)
    cold: CacheTierStats = msgspec.field(default_factory=CacheTierStats)
    skipped_files: int = 0


class RunningRequest(msgspec.Struct, kw_only=True):
    request_id: str
    model: str
    age_s: float
    prompt_tokens: int
    generated_tokens: int
    tokens_per_s: float
    served_by: str = "batch"


class ModelStats(msgspec.Struct, kw_only=True):
    model: str
    type: str = "llm"
    loaded: bool = True
    pinned: bool = False
    ttl_left_s: float | None = None
    memory_bytes: int = 0
    running: int = 0
    queued: int = 0
    requests_total: int = 0
    prompt_tokens_total: int = 0
    generation_tokens_total: int = 0
    prompt_tps: float = 0.0  # over the last few seconds
    generation_tps: float = 0.0
    ttft_ms: Percentiles = msgspec.field(default_factory=Percentiles)
    itl_ms: Percentiles = msgspec.field(default_factory=Percentiles)
    cached_tokens_total: int = 0


class HttpStats(msgspec.Struct, kw_only=True):
    """What the HTTP server answered since start (the engines count what they ran)."""

    requests_total: int = 0
    client_disconnects_total: int = 0  # the client left before its answer was complete
    server_errors_total: int = 0  # 5xx answers


class StatsSnapshot(msgspec.Struct, kw_only=True):
    time: float
    uptime_s: float
    version: str
    blas: str = ""
    running: int = 0
    queued: int = 0
    prompt_tps: float = 0.0
    generation_tps: float = 0.0
    requests_total: int = 0
    models: list[ModelStats] = msgspec.field(default_factory=list)
    requests: list[RunningRequest] = msgspec.field(default_factory=list)
    memory: MemoryStats = msgspec.field(default_factory=MemoryStats)
    cache: CacheStats = msgspec.field(default_factory=CacheStats)
    http: HttpStats = msgspec.field(default_factory=HttpStats)
