"""API-key guard, deny by default: with a key set, every route needs it (Bearer or
x-api-key) unless its path template is on the public allowlist below.

The key is compared in constant time and never logged or echoed in an error. A second
way in is a session check (the admin's signed cookie, say): a callable the app is
given, asked only when no key was sent.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from litestar.connection import ASGIConnection
from litestar.handlers.base import BaseRouteHandler
from litestar.types import Guard

from omlx.errors import Unauthorized

Connection = ASGIConnection[Any, Any, Any, Any]
# True when the connection carries a valid session of some other login (never raises).
SessionCheck = Callable[[Connection], bool]


@dataclass(frozen=True, slots=True)
class PublicRoutes:
    """Route path templates served without the key, compared exactly.

    Templates as Litestar routes them (`scope["path_template"]`, e.g. "/health" or
    "/admin/static/{file_path}"), not URL prefixes: a prefix would let a new route
    under it slip out of the key's reach.
    """

    templates: frozenset[str]

    def allows(self, template: str) -> bool:
        return template in self.templates

    def extended(self, templates: Iterable[str]) -> PublicRoutes:
        """This allowlist plus `templates` (the admin adds its login page and assets)."""
        return PublicRoutes(self.templates | frozenset(templates))


# Liveness and readiness only: probes and `omlx top` poll them before they know a key
# (neither says more than whether the server is up and its default model loaded).
PUBLIC_ROUTES = PublicRoutes(frozenset({"/health", "/ready"}))


def supplied_key(connection: Connection) -> str | None:
    header = connection.headers.get("authorization")
    if header:
        scheme, _, value = header.partition(" ")
        if scheme.lower() == "bearer":
            return value.strip()
    return connection.headers.get("x-api-key")


def make_api_key_guard(
    api_key: str,
    public: PublicRoutes = PUBLIC_ROUTES,
    session_check: SessionCheck | None = None,
) -> Guard:
    """A guard for every route: no-op without a key, else the key, a valid session or
    a public route."""
    expected = api_key.encode()

    def guard(connection: Connection, _: BaseRouteHandler) -> None:
        if not expected or public.allows(connection.scope.get("path_template", "")):
            return
        key = supplied_key(connection)
        if key is None:
            if session_check is not None and session_check(connection):
                return
            raise Unauthorized(
                "missing API key: send 'Authorization: Bearer <key>' (or 'x-api-key: <key>')"
            )
        if not hmac.compare_digest(key.encode(), expected):
            raise Unauthorized("invalid API key")

    return guard
