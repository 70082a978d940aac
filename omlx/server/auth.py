"""API-key guard: Bearer (OpenAI) or x-api-key (Anthropic) on /v1/* and /api/*.

The key is compared in constant time and never logged or echoed in an error.
"""

from __future__ import annotations

import hmac
from typing import Any

from litestar.connection import ASGIConnection
from litestar.handlers.base import BaseRouteHandler
from litestar.types import Guard

from omlx.errors import Unauthorized

PROTECTED_PREFIXES = ("/v1/", "/api/")


def supplied_key(connection: ASGIConnection[Any, Any, Any, Any]) -> str | None:
    header = connection.headers.get("authorization")
    if header:
        scheme, _, value = header.partition(" ")
        if scheme.lower() == "bearer":
            return value.strip()
    return connection.headers.get("x-api-key")


def make_api_key_guard(api_key: str) -> Guard:
    """A guard that rejects protected paths without the right key (no-op if key is empty)."""
    expected = api_key.encode()

    def guard(connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
        if not expected or not connection.url.path.startswith(PROTECTED_PREFIXES):
            return
        key = supplied_key(connection)
        if key is None:
            raise Unauthorized(
                "missing API key: send 'Authorization: Bearer <key>' (or 'x-api-key: <key>')"
            )
        if not hmac.compare_digest(key.encode(), expected):
            raise Unauthorized("invalid API key")

    return guard
