"""Cross-site requests, DNS rebinding, non-JSON bodies and deeply nested JSON (no key set)."""

from __future__ import annotations

import httpx
import pytest

from omlx.server.json_body import json_depth_exceeds
from omlx.server.origin import OriginPolicy
from omlx.settings import ServerSettings, Settings
from tests.fixtures.fake_pool import FakeModelPool
from tests.fixtures.live_server import LiveServer, running_server

CHAT = b'{"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]}'
JSON = {"content-type": "application/json"}
STATE_CHANGING = [
    ("/v1/models/fake-model/unload", b""),
    ("/api/cache/clear", b""),
    ("/v1/chat/completions", CHAT),
]


def _post(live: LiveServer, path: str, body: bytes, **headers: str) -> httpx.Response:
    return httpx.post(live.base_url + path, content=body, headers=headers, timeout=10)


@pytest.mark.parametrize(("path", "body"), STATE_CHANGING)
@pytest.mark.parametrize(
    "origin", ["http://evil.example", "null", "https://localhost.evil.example"]
)
def test_foreign_pages_cannot_change_state(
    pool: FakeModelPool, server: LiveServer, path: str, body: bytes, origin: str
) -> None:
    r = _post(server, path, body, origin=origin, **JSON)
    assert r.status_code == 403, r.text
    assert r.json()["error"]["code"] == "origin_not_allowed"
    assert pool.requests == []


@pytest.mark.parametrize(
    "origin", [None, "http://localhost:3000", "http://127.0.0.1:9", "http://[::1]", "SAME"]
)
def test_clis_loopback_and_own_pages_are_served(
    pool: FakeModelPool, server: LiveServer, origin: str | None
) -> None:
    headers = dict(JSON)
    if origin == "SAME":
        origin = server.base_url
    if origin:
        headers["origin"] = origin
    r = _post(server, "/v1/chat/completions", CHAT, **headers)
    assert r.status_code == 200, r.text


def test_configured_origin_is_served(pool: FakeModelPool) -> None:
    settings = Settings(server=ServerSettings(cors_origins=["https://app.example"]))
    with running_server(pool, settings) as live:
        ok = _post(live, "/v1/chat/completions", CHAT, origin="https://app.example", **JSON)
        bad = _post(live, "/v1/chat/completions", CHAT, origin="https://app.example.evil", **JSON)
    assert (ok.status_code, bad.status_code) == (200, 403)


@pytest.mark.parametrize("host", ["evil.example", "evil.example:8000", "127.0.0.1.evil.example"])
def test_rebound_host_names_are_refused(server: LiveServer, host: str) -> None:
    for method, path in (("GET", "/v1/models"), ("GET", "/health"), ("POST", "/api/cache/clear")):
        r = httpx.request(method, server.base_url + path, headers={"host": host}, timeout=10)
        assert r.status_code == 403, (method, path, r.text)
        assert r.json()["error"]["code"] == "host_not_allowed"


def test_allowed_hosts_setting(pool: FakeModelPool) -> None:
    settings = Settings(server=ServerSettings(allowed_hosts=["omlx.lan"]))
    with running_server(pool, settings) as live:
        ok = httpx.get(live.base_url + "/v1/models", headers={"host": "OMLX.lan:8000"})
        bad = httpx.get(live.base_url + "/v1/models", headers={"host": "other.lan"})
    assert (ok.status_code, bad.status_code) == (200, 403)


def test_host_policy_table() -> None:
    policy = OriginPolicy.build("127.0.0.1", [], [])
    for host in ("127.0.0.1:8000", "localhost", "app.localhost:1", "[::1]:80", "10.0.0.5", None):
        assert policy.host_allowed(host), host
    for host in ("evil.example", "localhost.evil.example", "127.0.0.1.nip.io"):
        assert not policy.host_allowed(host), host
    assert OriginPolicy.build("0.0.0.0", ["*"], []).host_allowed("anything.example")


@pytest.mark.parametrize("content_type", [None, "text/plain", "application/x-www-form-urlencoded"])
@pytest.mark.parametrize(
    "path", ["/v1/chat/completions", "/v1/completions", "/v1/messages", "/v1/embeddings",
             "/v1/rerank", "/v1/responses", "/v1/messages/count_tokens"]
)  # fmt: skip
def test_json_endpoints_refuse_other_media_types(
    pool: FakeModelPool, server: LiveServer, path: str, content_type: str | None
) -> None:
    headers = {"content-type": content_type} if content_type else {}
    r = _post(server, path, CHAT, **headers)
    assert r.status_code == 415, r.text
    assert "application/json" in r.text
    assert pool.requests == []


def test_json_with_charset_is_json(server: LiveServer) -> None:
    r = _post(
        server, "/v1/chat/completions", CHAT, **{"content-type": "application/json; charset=utf-8"}
    )
    assert r.status_code == 200


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions", "/v1/messages",
                                  "/v1/embeddings", "/v1/rerank", "/v1/responses",
                                  "/v1/messages/count_tokens"])  # fmt: skip
@pytest.mark.parametrize("where", ["ignored_field", "messages"])
def test_deep_nesting_is_a_clear_400(server: LiveServer, path: str, where: str) -> None:
    deep = b"[" * 5000 + b"]" * 5000
    body = b'{"model": "fake-model", "%s": %s}' % (where.encode(), deep)
    r = _post(server, path, body, **JSON)
    assert r.status_code == 400, r.text
    assert "nests" in r.text and "64" in r.text


def test_depth_scan_ignores_brackets_in_strings() -> None:
    assert not json_depth_exceeds(b'{"a": "' + b"[" * 500 + b'"}')
    assert not json_depth_exceeds(b'{"a": "\\"' + b"{" * 500 + b'"}')
    assert not json_depth_exceeds(b"[" * 64 + b"]" * 64)
    assert json_depth_exceeds(b"[" * 65 + b"]" * 65)
    assert not json_depth_exceeds(b"[[]]" * 1000)  # wide, not deep
