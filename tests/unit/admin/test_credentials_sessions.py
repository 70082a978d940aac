"""Admin sessions and credentials: signed ids, idle expiry, CSRF, password hashes, throttle."""

from __future__ import annotations

import pytest

from omlx.server.admin.credentials import (
    LoginThrottle,
    accepts,
    check_password,
    hash_password,
    is_password_hash,
)
from omlx.server.admin.session import MAX_AGE_S, SessionStore


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_session_is_found_by_its_signed_cookie_only() -> None:
    store = SessionStore(idle_s=60)
    session, cookie = store.create(authenticated=True)
    assert store.get(cookie) is session
    session_id, _, mac = cookie.rpartition(".")
    assert store.get(session_id) is None  # unsigned
    assert store.get(f"{session_id}.{'0' * len(mac)}") is None  # forged signature
    assert store.get(cookie + "x") is None
    assert SessionStore(idle_s=60).get(cookie) is None  # another process's secret


def test_idle_expiry_and_touch() -> None:
    clock = Clock()
    store = SessionStore(idle_s=60, clock=clock)
    _, cookie = store.create(authenticated=True)
    clock.now += 59
    assert store.get(cookie) is not None  # touched: idle time starts again
    clock.now += 59
    assert store.get(cookie) is not None
    clock.now += 61
    assert store.get(cookie) is None
    assert store.get(cookie) is None  # and forgotten


def test_sessions_end_after_max_age_however_active() -> None:
    clock = Clock()
    store = SessionStore(idle_s=MAX_AGE_S * 2, clock=clock)
    _, cookie = store.create(authenticated=True)
    clock.now += MAX_AGE_S + 1
    assert store.get(cookie) is None


def test_logout_ends_the_session() -> None:
    store = SessionStore(idle_s=60)
    session, cookie = store.create(authenticated=True)
    store.end(session.id)
    assert store.get(cookie) is None


def test_csrf_token_per_session() -> None:
    store = SessionStore(idle_s=60)
    a, _ = store.create(authenticated=True)
    b, _ = store.create(authenticated=True)
    assert a.csrf != b.csrf
    assert a.csrf_matches(a.csrf)
    assert not a.csrf_matches(b.csrf)
    assert not a.csrf_matches("")
    assert not a.csrf_matches(None)


def test_login_token_is_bound_to_its_nonce() -> None:
    store = SessionStore(idle_s=60)
    token = store.login_token("nonce-1")
    assert store.login_token_matches("nonce-1", token)
    assert not store.login_token_matches("nonce-2", token)
    assert not store.login_token_matches(None, token)
    assert not store.login_token_matches("nonce-1", None)


def test_password_hash_round_trip() -> None:
    stored = hash_password("correct horse")
    assert is_password_hash(stored)
    assert "correct horse" not in stored
    assert check_password("correct horse", stored)
    assert not check_password("correct hors", stored)
    assert hash_password("correct horse") != stored  # salted
    assert not check_password("x", "not-a-hash")
    assert not check_password("x", "scrypt$1$2$3$%%%$%%%")


@pytest.mark.parametrize(
    ("secret", "api_key", "password", "ok"),
    [
        ("k3y", "k3y", "", True),
        ("K3Y", "k3y", "", False),
        ("", "", "", False),  # nothing set accepts nothing
        ("hunter22", "k3y", "hunter22", True),
        ("k3y", "k3y", "hunter22", True),
        ("other", "k3y", "hunter22", False),
    ],
)
def test_accepts_the_key_or_the_password(secret, api_key, password, ok) -> None:
    stored = hash_password(password) if password else ""
    assert accepts(secret, api_key=api_key, password_hash=stored) is ok


def test_throttle_blocks_after_max_failures_until_the_window_passes() -> None:
    clock = Clock()
    throttle = LoginThrottle(max_failures=3, window_s=100, clock=clock)
    for n in (1, 2, 3):
        assert throttle.retry_after_s("1.2.3.4") == 0
        assert throttle.failed("1.2.3.4") == n
        clock.now += 10
    assert throttle.retry_after_s("1.2.3.4") == pytest.approx(70)  # the oldest leaves at 100
    assert throttle.retry_after_s("5.6.7.8") == 0  # per client
    clock.now += 71
    assert throttle.retry_after_s("1.2.3.4") == 0
    throttle.failed("1.2.3.4")
    throttle.succeeded("1.2.3.4")
    assert throttle.retry_after_s("1.2.3.4") == 0
