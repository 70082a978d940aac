"""Who may use the admin: open, behind a login, or refused; and the session middleware.

- open: no API key and no admin password, bound to a loopback address. Anyone on this
  machine may use it; a session still carries a CSRF token (and the app's origin guard
  keeps other sites' pages and rebound DNS names out).
- locked: `server.api_key` or `admin.password_hash` is set: a login makes a session.
- refused: no key and no password but bound to a non-loopback address: the admin
  answers with a page that says how to set a key.

The middleware turns a valid session cookie into `scope[SESSION_SCOPE_KEY]` for every
path, so the browser's own calls to /v1 and /api work without the API key, and refuses
(403) a state-changing request whose cookie names a session but whose `X-CSRF-Token`
header does not match it. Requests that carry an API key are left to the key guard.
"""

from __future__ import annotations

import enum
import ipaddress
import json
from http.cookies import SimpleCookie
from typing import Any

from litestar.types import ASGIApp, Message, Receive, Scope, Send

from omlx.server.admin.session import COOKIE, CSRF_HEADER, Session, SessionStore
from omlx.settings import Settings

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# Where the middleware puts the request's valid session; the API-key guard's session
# check (Admin.session_check) reads it, so the browser never needs the key.
SESSION_SCOPE_KEY = "omlx.admin_session"

# Everything under /admin is same-origin only: no inline script, nothing from elsewhere.
ADMIN_HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
        b"connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; "
        b"form-action 'self'; frame-ancestors 'none'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    # same-origin, not no-referrer: with no-referrer a form POST says `Origin: null`, which
    # the origin guard (rightly) refuses; other sites still get no referrer.
    (b"referrer-policy", b"same-origin"),
]


class Mode(enum.StrEnum):
    OPEN = "open"
    LOCKED = "locked"
    REFUSED = "refused"


def is_loopback(host: str) -> bool:
    name = host.strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def access_mode(settings: Settings) -> Mode:
    if settings.server.api_key or settings.admin.password_hash:
        return Mode.LOCKED
    return Mode.OPEN if is_loopback(settings.server.host) else Mode.REFUSED


def cookie_value(scope: Scope, name: str) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == b"cookie":
            jar: SimpleCookie = SimpleCookie()
            try:
                jar.load(value.decode("latin-1"))
            except Exception:  # a malformed Cookie header names no session
                return None
            if name in jar:
                return jar[name].value
    return None


def header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return value.decode("latin-1")
    return None


def session_of(scope: Scope) -> Session | None:
    """The session the middleware found for this request (None: no valid session)."""
    return scope.get(SESSION_SCOPE_KEY)


class AdminSessionMiddleware:
    """Pure ASGI: session lookup, CSRF on unsafe methods, security headers on /admin."""

    def __init__(self, app: ASGIApp, sessions: SessionStore, mode_of: Any) -> None:
        self.app = app
        self.sessions = sessions
        self.mode_of = mode_of  # () -> Mode, read per request (settings may change)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = scope.get("path", "")
        is_admin = path == "/admin" or path.startswith("/admin/")
        carries_key = header(scope, b"authorization") or header(scope, b"x-api-key")
        session = None if carries_key else self.sessions.get(cookie_value(scope, COOKIE))
        if session is not None and not session.authenticated and self.mode_of() is not Mode.OPEN:
            session = None  # an open-mode session is worth nothing once a login is required
        # The login form carries its own token (pages.py): a stale cookie must not block it.
        checks_csrf = path != "/admin/login" and scope.get("method", "GET") not in SAFE_METHODS
        token = header(scope, CSRF_HEADER.encode())
        if session is not None and checks_csrf and not session.csrf_matches(token):
            await _json(send, 403, "missing or wrong X-CSRF-Token header", "csrf_failed")
            return
        if session is not None:
            scope[SESSION_SCOPE_KEY] = session  # type: ignore[literal-required]
        if not is_admin:
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *ADMIN_HEADERS]
            await send(message)

        await self.app(scope, receive, with_headers)


async def _json(send: Send, status: int, message: str, code: str) -> None:
    body = json.dumps(
        {"error": {"message": message, "type": "permission_error", "param": None, "code": code}}
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
