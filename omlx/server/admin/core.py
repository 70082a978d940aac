"""The admin's state for one app: sessions, history, logs, jobs; built by create_app."""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from litestar.connection import ASGIConnection
from litestar.handlers.base import BaseRouteHandler
from litestar.middleware import DefineMiddleware

from omlx.engine.api import CacheAdmin, ModelCatalog, ModelPool
from omlx.errors import Forbidden, InvalidRequest, Unauthorized
from omlx.server.admin.access import (
    SAFE_METHODS,
    AdminSessionMiddleware,
    Mode,
    access_mode,
    session_of,
)
from omlx.server.admin.credentials import LoginThrottle
from omlx.server.admin.history import History, Sampler
from omlx.server.admin.jobs import Jobs
from omlx.server.admin.log_buffer import LogBuffer
from omlx.server.admin.session import Session, SessionStore
from omlx.server.auth import supplied_key
from omlx.settings import Settings, config_path


@dataclass(slots=True)
class AdminOptions:
    """What `omlx serve` knows beyond the Settings object."""

    config_file: Path | None = None  # where settings edits go (default: $OMLX_HOME/config.toml)
    sources: Mapping[str, str] = field(default_factory=dict)  # key -> default|file|env|cli
    catalog: ModelCatalog | None = None  # the model store: listing, delete, import
    history_interval_s: float = 1.0
    history_window_s: float = 600.0
    log_capacity: int = 5000


class Admin:
    def __init__(
        self,
        pool: ModelPool,
        settings: Settings,
        kv_cache: CacheAdmin | None,
        options: AdminOptions | None = None,
    ) -> None:
        self.pool = pool
        self.settings = settings
        self.kv_cache = kv_cache
        self.options = options or AdminOptions()
        self.config_file = self.options.config_file or config_path()
        self.sessions = SessionStore(settings.admin.session_idle_s)
        self.throttle = LoginThrottle()
        self.history = History(
            pool.stats, self.options.history_interval_s, self.options.history_window_s
        )
        self.sampler = Sampler(self.history)
        self.logs = LogBuffer(self.options.log_capacity)
        self.jobs = Jobs()
        # Settings applied live by the settings page (api_settings.LIVE_KEYS) land here.
        self.live: dict[str, Any] = {}

    @property
    def api_key(self) -> str:
        return self.settings.server.api_key

    @property
    def password_hash(self) -> str:
        return self.live.get("admin.password_hash", self.settings.admin.password_hash)

    def mode(self) -> Mode:
        if self.password_hash:
            return Mode.LOCKED
        return access_mode(self.settings)

    def session_check(self, connection: ASGIConnection[Any, Any, Any, Any]) -> bool:
        """For the API-key guard: the request holds a valid admin session (see access.py)."""
        return session_of(connection.scope) is not None

    def middleware(self) -> DefineMiddleware:
        return DefineMiddleware(AdminSessionMiddleware, sessions=self.sessions, mode_of=self.mode)

    async def start(self) -> None:
        self.logs.attach()
        self.sampler.start()

    async def stop(self) -> None:
        await self.sampler.stop()
        self.logs.detach()


def admin_of(request: ASGIConnection[Any, Any, Any, Any]) -> Admin:
    return request.app.state["admin"]


REFUSED_MESSAGE = (
    "the admin is off: this server listens on a non-loopback address without an API key"
)


def require_session(request: ASGIConnection[Any, Any, Any, Any]) -> Session | None:
    """Guard of the admin's JSON API: the request's session (None: an open-mode read).

    A state-changing request with a session got here only with its CSRF token (the
    middleware refuses it otherwise); one with the API key needs neither; one with
    neither is refused here (403 in open mode, where the page would have given it a
    session; 401 when a login is required).
    """
    mode = admin_of(request).mode()
    if mode is Mode.REFUSED:
        raise Forbidden(REFUSED_MESSAGE)
    session = session_of(request.scope)
    if session is not None:
        return session
    if _holds_api_key(request):  # a script with the key needs no session (nor CSRF)
        return None
    if mode is Mode.LOCKED:
        raise Unauthorized("log in to the admin first")
    if request.scope.get("method") not in SAFE_METHODS:
        raise Forbidden("no admin session: reload the page for a CSRF token")
    return None


def query_int(params: Any, name: str, default: int) -> int:
    """An integer query parameter; a malformed one is a 400, not a 500."""
    raw = params.get(name)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError:
        raise InvalidRequest(f"{name} must be an integer", param=name) from None


def _holds_api_key(connection: ASGIConnection[Any, Any, Any, Any]) -> bool:
    expected = admin_of(connection).api_key
    supplied = supplied_key(connection)
    return (
        bool(expected)
        and supplied is not None
        and hmac.compare_digest(supplied.encode(), expected.encode())
    )


def admin_guard(connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
    require_session(connection)  # type: ignore[arg-type]
