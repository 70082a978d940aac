"""GET /health: liveness for load balancers and test fixtures (never needs the API key)."""

from __future__ import annotations

from typing import Any

from litestar import Request, get

from omlx import __version__
from omlx.server.generation import pool_of


@get("/health")
async def health(request: Request[Any, Any, Any]) -> dict[str, Any]:
    loaded = sum(1 for m in pool_of(request).list_models() if m.loaded)
    return {"status": "ok", "version": __version__, "models_loaded": loaded}


ROUTES = [health]
