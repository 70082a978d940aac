"""What the login form accepts (the API key or the admin password), and its throttle.

The admin password is stored only as an scrypt hash (`admin.password_hash`); the API key
is compared in constant time. Neither value is ever logged or sent back.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import threading
import time
from collections import deque

SCRYPT_N, SCRYPT_R, SCRYPT_P = 2**14, 8, 1
MIN_PASSWORD_CHARS = 8


def hash_password(password: str) -> str:
    """`scrypt$N$r$p$salt$hash` (base64): what `admin.password_hash` holds."""
    salt = secrets.token_bytes(16)
    digest = hashlib.scrypt(password.encode(), salt=salt, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P)
    b64 = base64.b64encode
    return f"scrypt${SCRYPT_N}${SCRYPT_R}${SCRYPT_P}${b64(salt).decode()}${b64(digest).decode()}"


def check_password(password: str, stored: str) -> bool:
    try:
        scheme, n, r, p, salt, digest = stored.split("$")
        if scheme != "scrypt":
            return False
        expected = base64.b64decode(digest)
        got = hashlib.scrypt(
            password.encode(), salt=base64.b64decode(salt), n=int(n), r=int(r), p=int(p),
            dklen=len(expected),
        )  # fmt: skip
    except (ValueError, TypeError):
        return False
    return hmac.compare_digest(got, expected)


def is_password_hash(value: str) -> bool:
    return value.startswith("scrypt$") and value.count("$") == 5


def accepts(secret: str, *, api_key: str, password_hash: str) -> bool:
    """True when `secret` is the API key or the admin password (both checked, no early exit)."""
    key_ok = bool(api_key) and hmac.compare_digest(secret.encode(), api_key.encode())
    password_ok = bool(password_hash) and check_password(secret, password_hash)
    return key_ok or password_ok


class LoginThrottle:
    """At most `max_failures` failed logins per client in `window_s`; then refuse until the
    oldest failure leaves the window. Clients are keyed by address."""

    def __init__(self, max_failures: int = 5, window_s: float = 300.0, *, clock=time.monotonic):
        self.max_failures = max_failures
        self.window_s = window_s
        self._clock = clock
        self._failures: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def retry_after_s(self, client: str) -> float:
        """Seconds this client must wait before another attempt; 0 when it may try now."""
        with self._lock:
            recent = self._prune(client)
            if len(recent) < self.max_failures:
                return 0.0
            return max(0.0, recent[0] + self.window_s - self._clock())

    def failed(self, client: str) -> int:
        """Record a failure; returns the client's failures within the window."""
        with self._lock:
            recent = self._prune(client)
            recent.append(self._clock())
            if len(self._failures) > 10_000:  # a flood of addresses: forget the idle ones
                for other in [c for c, q in self._failures.items() if not q]:
                    del self._failures[other]
            return len(recent)

    def succeeded(self, client: str) -> None:
        with self._lock:
            self._failures.pop(client, None)

    def _prune(self, client: str) -> deque[float]:
        recent = self._failures.setdefault(client, deque())
        cutoff = self._clock() - self.window_s
        while recent and recent[0] < cutoff:
            recent.popleft()
        return recent
