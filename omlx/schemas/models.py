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
    # Chat models: the context window, and the completion budget clients should plan for
    # (what `omlx launch` writes into agents' configs).
    context_length: int | None = None
    max_output_tokens: int | None = None


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


class StoreEntry(Struct, kw_only=True):
    """One model folder in the store (`omlx models --json` facts), for the admin."""

    name: str
    type: str
    architecture: str
    num_params: int | None = None
    size_bytes: int = 0
    quantization: str | None = None
    context_length: int | None = None
    source: str = "local"  # local (a model directory) | hf-cache
    path: str
    deletable: bool = False  # in a store directory (not the hub cache, not a given path)


class ImportProgress(Struct, kw_only=True):
    """How far an import got: a phase and, when known, bytes or steps done of a total."""

    phase: str  # resolving | downloading | converting | linking | done
    done: int = 0
    total: int | None = None
    unit: str = "bytes"  # bytes | tensors
    message: str = ""
