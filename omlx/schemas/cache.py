"""Wire schema of the cache report: `GET /api/cache/stats` and `omlx cache inspect --json`."""

from __future__ import annotations

from typing import Literal

import msgspec


class TierUsage(msgspec.Struct, kw_only=True):
    blocks: int = 0
    tokens: int = 0
    bytes: int = 0
    oldest: float | None = None  # unix time of the least recently used block
    newest: float | None = None  # unix time of the most recently used block


class ModelCacheReport(msgspec.Struct, kw_only=True):
    model: str  # display name when known, else the fingerprint's first 12 chars
    fingerprint: str
    hot: TierUsage = msgspec.field(default_factory=TierUsage)
    cold: TierUsage = msgspec.field(default_factory=TierUsage)
    hits: int = 0
    misses: int = 0
    hit_tokens: int = 0
    cold_hit_tokens: int = 0  # of hit_tokens, those read back from the cold tier
    hit_rate: float | None = None  # hits / (hits + misses); None before any lookup


class CacheReport(msgspec.Struct, kw_only=True):
    enabled: bool
    source: Literal["server", "disk"]  # a running server's view, or a scan of the cold dir
    cold_dir: str
    block_size: int
    hot_budget_bytes: int = 0
    cold_cap_bytes: int = 0
    skipped_files: int = 0
    models: list[ModelCacheReport] = msgspec.field(default_factory=list)
