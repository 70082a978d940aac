"""GET /health: liveness for load balancers and test fixtures (never needs the API key).

Kept free of model scans: dashboards and probes poll it often.
"""

from __future__ import annotations

import msgspec
from litestar import get

from omlx import __version__
from omlx.server.openapi import documented


class Health(msgspec.Struct, kw_only=True):
    status: str
    version: str


class Version(msgspec.Struct, kw_only=True):
    version: str
    server: str


@get("/health", operation_class=documented(returns=Health))
async def health() -> Health:
    return Health(status="ok", version=__version__)


@get("/version", operation_class=documented(returns=Version))
async def version() -> Version:
    """The version under the path local-server clients probe (vLLM's): Hermes Agent asks
    it to learn what serves it, then reads windows from /v1/models/{id}."""
    return Version(version=__version__, server="omlx")


ROUTES = [health, version]
