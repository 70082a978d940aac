"""Admin sessions: signed cookie ids, server-side state, idle expiry, CSRF tokens.

A session is a random id kept in this process's memory; the cookie carries the id and
an HMAC of it under a per-process secret, so a forged or guessed cookie is refused
before any lookup, and a restart ends every session. Each session has its own CSRF
token, which the page reads from a <meta> tag and sends back in `X-CSRF-Token`.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from dataclasses import dataclass, field

COOKIE = "omlx_session"
CSRF_HEADER = "x-csrf-token"
# However active, a session ends after this long (a stolen cookie does not live forever).
MAX_AGE_S = 24 * 3600.0
MAX_SESSIONS = 1024  # beyond this the least recently used is dropped


@dataclass(slots=True)
class Session:
    id: str
    csrf: str
    authenticated: bool  # False: an open-mode session that only carries a CSRF token
    created_s: float
    last_seen_s: float
    data: dict[str, str] = field(default_factory=dict)

    def csrf_matches(self, token: str | None) -> bool:
        return bool(token) and hmac.compare_digest(self.csrf.encode(), str(token).encode())


class SessionStore:
    """Sessions of this process; thread-safe; `idle_s` may change while running."""

    def __init__(self, idle_s: float, *, clock=time.monotonic) -> None:
        self.idle_s = idle_s
        self._clock = clock
        self._secret = secrets.token_bytes(32)
        self._sessions: dict[str, Session] = {}
        self._lock = threading.Lock()

    def create(self, *, authenticated: bool) -> tuple[Session, str]:
        """A new session and the cookie value that names it."""
        now = self._clock()
        session = Session(
            id=secrets.token_urlsafe(32),
            csrf=secrets.token_urlsafe(32),
            authenticated=authenticated,
            created_s=now,
            last_seen_s=now,
        )
        with self._lock:
            if len(self._sessions) >= MAX_SESSIONS:
                oldest = min(self._sessions.values(), key=lambda s: s.last_seen_s)
                del self._sessions[oldest.id]
            self._sessions[session.id] = session
        return session, self._sign(session.id)

    def get(self, cookie: str | None, *, touch: bool = True) -> Session | None:
        """The live session a cookie names, or None (bad signature, expired, unknown)."""
        session_id = self._verify(cookie)
        if session_id is None:
            return None
        now = self._clock()
        with self._lock:
            session = self._sessions.get(session_id)
            if session is None:
                return None
            if now - session.last_seen_s > self.idle_s or now - session.created_s > MAX_AGE_S:
                del self._sessions[session_id]
                return None
            if touch:
                session.last_seen_s = now
            return session

    def end(self, session_id: str) -> None:
        with self._lock:
            self._sessions.pop(session_id, None)

    def _sign(self, session_id: str) -> str:
        mac = hmac.new(self._secret, session_id.encode(), hashlib.sha256).hexdigest()
        return f"{session_id}.{mac}"

    def _verify(self, cookie: str | None) -> str | None:
        if not cookie or "." not in cookie:
            return None
        session_id, _, mac = cookie.rpartition(".")
        expected = hmac.new(self._secret, session_id.encode(), hashlib.sha256).hexdigest()
        return session_id if hmac.compare_digest(mac.encode(), expected.encode()) else None

    def login_token(self, nonce: str) -> str:
        """The login form's CSRF token, bound to the pre-login nonce cookie."""
        return hmac.new(self._secret, b"login:" + nonce.encode(), hashlib.sha256).hexdigest()

    def login_token_matches(self, nonce: str | None, token: str | None) -> bool:
        if not nonce or not token:
            return False
        return hmac.compare_digest(self.login_token(nonce).encode(), str(token).encode())
