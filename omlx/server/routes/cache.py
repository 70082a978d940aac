"""GET /api/cache/stats (per-model cache report) and POST /api/cache/clear."""

from __future__ import annotations

import inspect
from typing import Annotated, Any

from litestar import Request, get, post
from litestar.params import Parameter

from omlx.engine.api import CacheAdmin
from omlx.errors import InvalidRequest, ModelNotFound
from omlx.schemas.cache import CacheReport
from omlx.server.openapi import documented

TIERS = ("hot", "cold", "all")


async def _answer(value: Any) -> Any:
    """A CacheAdmin answers directly, or (the engine process's) with an awaitable."""
    return await value if inspect.isawaitable(value) else value


def cache_of(request: Request[Any, Any, Any]) -> CacheAdmin:
    cache = request.app.state.get("cache")
    if cache is None:
        raise InvalidRequest("the KV cache is not enabled on this server")
    return cache


@get("/api/cache/stats", operation_class=documented(returns=CacheReport))
async def cache_stats(request: Request[Any, Any, Any]) -> CacheReport:
    return await _answer(cache_of(request).report())


@post("/api/cache/clear", status_code=200, operation_class=documented(returns=int))
async def cache_clear(
    request: Request[Any, Any, Any],
    tier: Annotated[str, Parameter(query="tier")] = "all",
    model: Annotated[str | None, Parameter(query="model")] = None,
) -> int:
    """Drop blocks of one tier (or all), of one model (name or fingerprint prefix) or all."""
    if tier not in TIERS:
        raise InvalidRequest(f"tier must be one of {', '.join(TIERS)}, not {tier!r}", param="tier")
    cache = cache_of(request)
    if model is None:
        return await _answer(cache.clear(None, tier))
    report: CacheReport = await _answer(cache.report())
    fingerprints = [
        m.fingerprint for m in report.models
        if m.model == model or m.fingerprint.startswith(model)
    ]  # fmt: skip
    if not fingerprints:
        raise ModelNotFound(f"no cached blocks for model {model!r}", param="model")
    return sum([await _answer(cache.clear(fp, tier)) for fp in fingerprints])


ROUTES = [cache_stats, cache_clear]
