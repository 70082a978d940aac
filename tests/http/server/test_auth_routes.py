"""Deny by default: with a key set, every registered route needs it, except the allowlist."""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest
from litestar.routes import HTTPRoute

from omlx.server.admin import PUBLIC_TEMPLATES as ADMIN_PUBLIC
from omlx.server.app import create_app
from omlx.server.auth import PUBLIC_ROUTES, PublicRoutes
from omlx.settings import ServerSettings, Settings
from tests.fixtures.fake_pool import FakeModelPool
from tests.fixtures.live_server import LiveServer, running_server

KEY = "sk-route-walk-7"
SESSION = "valid-session"


def _session_check(connection) -> bool:
    return connection.cookies.get("session") == SESSION


@pytest.fixture(scope="module")
def keyed() -> Iterator[LiveServer]:
    settings = Settings(server=ServerSettings(api_key=KEY))
    app = create_app(FakeModelPool(), settings, session_check=_session_check)
    with running_server(app, settings) as live:
        yield live


def _requests(live: LiveServer) -> list[tuple[str, str, str]]:
    """(method, concrete path, template) for every method of every route of the app."""
    out = []
    for route in live.app.routes:
        assert isinstance(route, HTTPRoute), route  # a websocket/ASGI mount needs a look
        path = re.sub(r"\{[^}]+\}", "x", route.path_format)
        out.extend((m, path, route.path_format) for m in sorted(route.methods))
    return out


def _send(
    live: LiveServer, method: str, path: str, *, content: bytes = b"{}", headers=None, cookies=None
) -> httpx.Response:
    headers = {"content-type": "application/json", **(headers or {})}
    with (
        httpx.Client(cookies=cookies, timeout=10) as client,
        client.stream(method, live.base_url + path, content=content, headers=headers) as r,
    ):
        if not r.headers.get("content-type", "").startswith("text/event-stream"):
            r.read()  # an endless SSE stream (/api/stats/stream) is judged by its status
        return r


def test_public_allowlist_is_liveness_and_readiness_only() -> None:
    assert PublicRoutes(frozenset({"/health", "/ready"})) == PUBLIC_ROUTES
    admin = PUBLIC_ROUTES.extended(["/admin/login"])
    assert admin.allows("/admin/login") and admin.allows("/health")
    assert not admin.allows("/admin/login/x") and not PUBLIC_ROUTES.allows("/admin/login")


def test_every_route_needs_the_key_unless_public(keyed: LiveServer) -> None:
    walked = _requests(keyed)
    assert {"/rerank", "/v2/rerank", "/v1/rerank"} <= {t for _, _, t in walked}
    open_routes = []
    for method, path, template in walked:
        r = _send(keyed, method, path)
        if r.status_code != 401:
            open_routes.append((method, template, r.status_code))
        elif method != "HEAD":
            assert KEY not in r.text
    # The only way in without the key: /health, /ready and the admin's login pages and
    # assets (its pages send a browser without a session to the login; its API needs one).
    public = {"/health", "/ready", *ADMIN_PUBLIC}
    assert {t for _, t, _ in open_routes} == public, open_routes
    assert {
        "/admin", "/admin/login", "/admin/{name}", "/admin/static/{version}/{rel}"
    } == ADMIN_PUBLIC  # fmt: skip


def test_every_route_accepts_the_key_or_a_session(keyed: LiveServer) -> None:
    for method, path, template in _requests(keyed):
        if template.startswith("/admin"):
            continue  # behind the admin's own login as well (its tests cover it)
        for auth in (
            {"headers": {"authorization": f"Bearer {KEY}"}},
            {"cookies": {"session": SESSION}},
        ):
            r = _send(keyed, method, path, **auth)
            is_sse = r.headers.get("content-type", "").startswith("text/event-stream")
            refused_by_us = r.status_code == 401 or (not is_sse and "_not_allowed" in r.text)
            assert not refused_by_us, (method, template, auth, r.status_code, r.text[:300])


def test_wrong_key_is_refused_even_with_a_session(keyed: LiveServer) -> None:
    r = _send(keyed, "POST", "/rerank", headers={"x-api-key": "nope"}, cookies={"session": SESSION})
    assert r.status_code == 401
    r = _send(keyed, "POST", "/v2/rerank", cookies={"session": "forged"})
    assert r.status_code == 401


def test_unknown_model_404_needs_the_key_first(keyed: LiveServer) -> None:
    # Model names are only listed to callers who passed the guard.
    r = _send(
        keyed, "POST", "/rerank", content=b'{"model": "nope", "query": "q", "documents": ["d"]}'
    )
    assert r.status_code == 401 and "fake-model" not in r.text
