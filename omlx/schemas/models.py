"""Model pool status and actions: GET /v1/models/status, POST /v1/models/{id}/{action}."""

from __future__ import annotations

from typing import Literal

import msgspec
from msgspec import Struct

ModelState = Literal["loaded", "loading", "available"]


class ModelStatus(Struct, kw_only=True):
    id: str
    type: str  # llm | vlm | embedding | reranker | ocr
    state: ModelState
    pinned: bool = False
    memory_bytes: int = 0  # measured once loaded; the estimate while loading
    estimated_bytes: int | None = None  # from the weight files, before loading
    last_used: float | None = None  # unix time of the last request start or end
    ttl_s: float | None = None  # idle time before an automatic unload; None = never
    ttl_left_s: float | None = None
    in_flight: int = 0


class PoolStatus(Struct, kw_only=True):
    object: str = "pool.status"
    budget_bytes: int
    used_bytes: int
    data: list[ModelStatus] = msgspec.field(default_factory=list)


class ModelActionResult(Struct, kw_only=True):
    id: str
    action: Literal["load", "unload", "pin", "unpin"]
    ok: bool = True
    state: ModelState
    pinned: bool
