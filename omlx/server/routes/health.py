"""GET /health: liveness; GET /ready: readiness, whether the default model is loaded.
Neither needs the API key, and neither scans the model store: probes poll them often.

/health answers 200 as soon as the server listens, before any model is loaded; /ready
answers 200 once the default model is (`omlx serve --preload` loads it at start; without
it the first request loads it), and 503 until then.
"""

from __future__ import annotations

from typing import Literal

import msgspec
from litestar import Response, get
from litestar.datastructures import State

from omlx import __version__
from omlx.server.openapi import documented


class Health(msgspec.Struct, kw_only=True):
    status: str
    version: str


class Ready(msgspec.Struct, kw_only=True):
    # ready: the default model is loaded (or none is configured); loading: it is being
    # loaded; not_loaded: it loads at the first request; failed: the preload failed.
    status: Literal["ready", "loading", "not_loaded", "failed"]
    default_model: str | None
    error: str | None = None


class Version(msgspec.Struct, kw_only=True):
    version: str
    server: str


@get("/health", operation_class=documented(returns=Health))
async def health() -> Health:
    return Health(status="ok", version=__version__)


@get("/ready", operation_class=documented(returns=Ready))
async def ready(state: State) -> Response[Ready]:
    name, model_state = state["pool"].model_state()
    error = state.get("preload_error")
    if not name:
        body = Ready(status="ready", default_model=None)
    elif model_state == "loaded":
        body = Ready(status="ready", default_model=name)
    elif model_state == "loading":
        body = Ready(status="loading", default_model=name)
    elif error is not None:
        body = Ready(status="failed", default_model=name, error=error)
    else:
        body = Ready(status="not_loaded", default_model=name)
    return Response(body, status_code=200 if body.status == "ready" else 503)


@get("/version", operation_class=documented(returns=Version))
async def version() -> Version:
    """The version under the path local-server clients probe (vLLM's): Hermes Agent asks
    it to learn what serves it, then reads windows from /v1/models/{id}."""
    return Version(version=__version__, server="omlx")


ROUTES = [health, ready, version]
