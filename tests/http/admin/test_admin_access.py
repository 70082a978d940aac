"""Who may use /admin, over real HTTP: open on loopback, a login when a key is set, refused
on a network address without one; sessions work for /v1 and /api; CSRF on every change."""

from __future__ import annotations

import logging
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from omlx.server.admin import AdminOptions
from omlx.server.app import create_app
from omlx.settings import ServerSettings, Settings
from tests.fixtures.fake_pool import FakeModelPool
from tests.fixtures.live_server import LiveServer, running_server

KEY = "s3cret-key-value-xyz"
CSRF_RE = re.compile(r'name="csrf-token" content="([^"]*)"')
TOKEN_RE = re.compile(r'name="token" value="([^"]+)"')


def _serve(tmp_path: Path, **server: object):
    settings = Settings(server=ServerSettings(**server))  # type: ignore[arg-type]
    options = AdminOptions(config_file=tmp_path / "config.toml", history_interval_s=0.05)
    app = create_app(FakeModelPool(), settings, admin_options=options)
    return running_server(app, settings)


@pytest.fixture(scope="module")
def locked(tmp_path_factory) -> Iterator[LiveServer]:
    with _serve(tmp_path_factory.mktemp("locked"), api_key=KEY) as live:
        yield live


@pytest.fixture(scope="module")
def open_server(tmp_path_factory) -> Iterator[LiveServer]:
    with _serve(tmp_path_factory.mktemp("open")) as live:
        yield live


def _login(base: str, secret: str, **headers: str) -> tuple[httpx.Client, httpx.Response]:
    client = httpx.Client(base_url=base, headers=headers)
    form = client.get("/admin/login")
    assert form.status_code == 200
    token = TOKEN_RE.search(form.text)[1]  # type: ignore[index]
    resp = client.post("/admin/login", data={"secret": secret, "token": token, "next": "/admin"})
    return client, resp


def _csrf(client: httpx.Client) -> str:
    return CSRF_RE.search(client.get("/admin/settings").text)[1]  # type: ignore[index]


# -- open mode (no key, loopback) ------------------------------------------------------------


def test_open_mode_serves_pages_with_a_session_and_strict_headers(open_server) -> None:
    resp = httpx.get(f"{open_server.base_url}/admin")
    assert resp.status_code == 200
    cookie = resp.headers["set-cookie"]
    assert cookie.startswith("omlx_session=") and "HttpOnly" in cookie
    assert "SameSite=strict" in cookie and "Secure" not in cookie  # plain http
    assert "script-src 'self'" in resp.headers["content-security-policy"]
    assert resp.headers["x-frame-options"] == "DENY"
    assert resp.headers["cache-control"] == "no-store"
    assert CSRF_RE.search(resp.text)[1]  # type: ignore[index]


def test_open_mode_still_refuses_changes_without_the_csrf_token(open_server) -> None:
    client = httpx.Client(base_url=open_server.base_url)
    body = {"key": "engine.max_running", "value": "7"}
    assert client.put("/admin/api/settings", json=body).status_code == 403  # no session
    token = _csrf(client)
    assert client.put("/admin/api/settings", json=body).status_code == 403  # no token
    bad = client.put("/admin/api/settings", json=body, headers={"x-csrf-token": "nope"})
    assert bad.status_code == 403 and bad.json()["error"]["code"] == "csrf_failed"
    ok = client.put("/admin/api/settings", json=body, headers={"x-csrf-token": token})
    assert ok.status_code == 200, ok.text
    row = ok.json()  # the running value stays; the file's applies at the next start
    assert (row["value"], row["file_value"], row["pending_restart"]) == (32, 7, True)


def test_settings_edit_lands_in_config_toml_and_bad_values_say_why(open_server) -> None:
    client = httpx.Client(base_url=open_server.base_url)
    headers = {"x-csrf-token": _csrf(client)}
    ok = client.put("/admin/api/settings", json={"key": "log.level", "value": "DEBUG"},
                    headers=headers)  # fmt: skip
    assert ok.status_code == 200 and ok.json()["live"] is True
    assert logging.getLogger().level == logging.DEBUG  # applied at once
    config = open_server.app.state["admin"].config_file
    assert tomllib.loads(config.read_text())["log"]["level"] == "DEBUG"
    bad = client.put("/admin/api/settings", json={"key": "server.port", "value": "99999"},
                     headers=headers)  # fmt: skip
    assert bad.status_code == 400
    assert bad.json()["error"]["param"] == "server.port"
    assert "65535" in bad.json()["error"]["message"]
    assert "port" not in tomllib.loads(config.read_text()).get("server", {})
    unknown = client.put("/admin/api/settings", json={"key": "server.nope", "value": "1"},
                         headers=headers)  # fmt: skip
    assert unknown.status_code == 400 and "unknown setting" in unknown.json()["error"]["message"]
    logging.getLogger().setLevel(logging.WARNING)


def test_admin_refuses_a_rebound_host_name(open_server) -> None:
    # A page on another site whose DNS name was rebound to 127.0.0.1 sends its own Host
    # (the app's origin guard covers the admin too).
    resp = httpx.get(f"{open_server.base_url}/admin", headers={"host": "evil.example:80"})
    assert resp.status_code == 403 and "omlx_session" not in resp.headers.get("set-cookie", "")
    assert httpx.get(f"{open_server.base_url}/admin", headers={"host": "localhost"}).is_success


def test_static_files_are_versioned_compressed_and_cached(open_server) -> None:
    page = httpx.get(f"{open_server.base_url}/admin").text
    url = re.search(r'src="(/admin/static/[0-9a-f]+/js/dashboard\.js)"', page)[1]  # type: ignore[index]
    resp = httpx.get(open_server.base_url + url, headers={"accept-encoding": "gzip"})
    assert resp.status_code == 200 and resp.headers["content-encoding"] == "gzip"
    assert "immutable" in resp.headers["cache-control"]
    assert resp.headers["content-type"].startswith("text/javascript")
    stale = httpx.get(open_server.base_url + url.replace("/static/", "/static/0ld").replace(
        url.split("/")[3], "000000000000"))  # fmt: skip
    assert stale.status_code == 200 and stale.headers["cache-control"] == "no-cache"
    escape = httpx.get(f"{open_server.base_url}/admin/static/x/..%2F..%2Fsettings.py")
    assert escape.status_code == 404


# -- locked mode (server.api_key set) ---------------------------------------------------------


def test_locked_admin_sends_pages_to_the_login_and_api_calls_get_401(locked) -> None:
    resp = httpx.get(f"{locked.base_url}/admin/models")
    assert resp.status_code in (302, 303) and resp.headers["location"].startswith("/admin/login")
    assert httpx.get(f"{locked.base_url}/admin/api/history").status_code == 401
    assert httpx.get(f"{locked.base_url}/v1/models").status_code == 401


def test_wrong_secret_is_refused_and_logged_without_the_value(locked, caplog) -> None:
    caplog.set_level(logging.WARNING)
    _, resp = _login(locked.base_url, "not-the-key")
    assert resp.status_code == 401 and "omlx_session" not in resp.headers.get("set-cookie", "")
    assert "That is not the admin password or the API key." in resp.text
    assert any("admin login failed" in r.getMessage() for r in caplog.records)
    assert "not-the-key" not in caplog.text


def test_login_needs_the_forms_own_token(locked) -> None:
    client = httpx.Client(base_url=locked.base_url)
    resp = client.post("/admin/login", data={"secret": KEY, "token": "forged"})
    assert resp.status_code == 403 and "omlx_session" not in resp.headers.get("set-cookie", "")


def test_session_cookie_works_for_admin_v1_and_api_and_csrf_guards_changes(locked) -> None:
    client, resp = _login(locked.base_url, KEY)
    assert resp.status_code == 303 and resp.headers["location"] == "/admin"
    cookie = resp.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie
    token = _csrf(client)
    assert client.get("/admin/api/history").status_code == 200
    assert client.get("/v1/models").json()["data"][0]["id"] == "fake-model"  # no API key sent
    assert client.get("/api/stats").status_code == 200
    chat = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]}
    refused = client.post("/v1/chat/completions", json=chat)
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "csrf_failed"
    ok = client.post("/v1/chat/completions", json=chat, headers={"x-csrf-token": token})
    assert ok.status_code == 200 and ok.json()["choices"][0]["message"]["content"]
    # A client with the key needs no session and no CSRF token (not a browser).
    keyed = httpx.post(f"{locked.base_url}/v1/chat/completions", json=chat,
                       headers={"authorization": f"Bearer {KEY}"})  # fmt: skip
    assert keyed.status_code == 200


def test_the_key_is_never_in_any_admin_response(locked) -> None:
    client, _ = _login(locked.base_url, KEY)
    bodies = [client.get(p).text for p in (
        "/admin", "/admin/models", "/admin/chat", "/admin/bench", "/admin/cache",
        "/admin/settings", "/admin/logs", "/admin/integrations", "/admin/api/settings",
        "/admin/api/logs?level=DEBUG", "/admin/api/models", "/admin/api/history",
    )]  # fmt: skip
    assert all(KEY not in body for body in bodies)
    row = next(r for r in client.get("/admin/api/settings").json()["rows"]
               if r["key"] == "server.api_key")  # fmt: skip
    assert row["value"] is None and row["is_secret"] and row["is_set"]


def test_logout_ends_the_session(locked) -> None:
    client, _ = _login(locked.base_url, KEY)
    token = _csrf(client)
    assert client.post("/admin/logout").status_code == 403  # needs its CSRF token too
    resp = client.post("/admin/logout", headers={"x-csrf-token": token})
    assert resp.status_code == 200 and "Max-Age=0" in resp.headers["set-cookie"]
    assert client.get("/admin/api/history").status_code == 401
    assert client.get("/v1/models").status_code == 401


def test_cookie_is_secure_behind_https(locked) -> None:
    # uvicorn trusts X-Forwarded-Proto from 127.0.0.1 (a local TLS proxy). httpx keeps
    # Secure cookies off plain http, so the test carries the login nonce itself.
    https = {"x-forwarded-proto": "https"}
    form = httpx.get(f"{locked.base_url}/admin/login", headers=https)
    assert "Secure" in form.headers["set-cookie"]
    nonce = form.cookies["omlx_login"]
    token = TOKEN_RE.search(form.text)[1]  # type: ignore[index]
    resp = httpx.post(
        f"{locked.base_url}/admin/login",
        data={"secret": KEY, "token": token},
        headers={**https, "cookie": f"omlx_login={nonce}"},
    )
    assert resp.status_code == 303
    session_cookie = next(c for c in resp.headers.get_list("set-cookie") if "omlx_session=" in c)
    assert "Secure" in session_cookie and "HttpOnly" in session_cookie


def test_failed_logins_are_throttled(tmp_path) -> None:
    with _serve(tmp_path, api_key=KEY) as live:
        for _ in range(5):
            assert _login(live.base_url, "wrong")[1].status_code == 401
        _, resp = _login(live.base_url, KEY)  # even the right key waits now
        assert resp.status_code == 429 and int(resp.headers["retry-after"]) > 0


def test_admin_password_is_hashed_and_accepted_at_login(tmp_path) -> None:
    with _serve(tmp_path) as live:
        client = httpx.Client(base_url=live.base_url)
        headers = {"x-csrf-token": _csrf(client)}
        short = client.post("/admin/api/settings/password", json={"password": "short"},
                            headers=headers)  # fmt: skip
        assert short.status_code == 400
        resp = client.post("/admin/api/settings/password", json={"password": "long enough pw"},
                           headers=headers)  # fmt: skip
        assert resp.status_code == 200 and resp.json()["is_set"]
        stored = tomllib.loads((tmp_path / "config.toml").read_text())["admin"]["password_hash"]
        assert stored.startswith("scrypt$") and "long enough pw" not in stored
        # The admin is locked now: the open-mode session no longer counts.
        assert client.get("/admin/api/history").status_code == 401
        assert _login(live.base_url, "long enough pw")[1].status_code == 303


# -- refused mode (network address, no key) ----------------------------------------------------


def test_network_bind_without_a_key_refuses_with_a_page_that_says_how(tmp_path) -> None:
    with _serve(tmp_path, host="0.0.0.0") as live:
        page = httpx.get(f"{live.base_url}/admin")
        assert page.status_code == 403
        assert "server.api_key" in page.text and "--api-key" in page.text
        assert httpx.get(f"{live.base_url}/admin/api/history").status_code == 403
        assert httpx.get(f"{live.base_url}/admin/login").status_code == 403


def test_the_api_key_opens_the_admin_api_to_scripts(locked) -> None:
    keyed = httpx.get(f"{locked.base_url}/admin/api/settings", headers={"x-api-key": KEY})
    assert keyed.status_code == 200
    wrong = httpx.get(f"{locked.base_url}/admin/api/settings", headers={"x-api-key": "nope"})
    assert wrong.status_code == 401


def test_a_password_only_admin_ignores_made_up_keys(tmp_path) -> None:
    from omlx.server.admin.credentials import hash_password
    from omlx.settings import AdminSettings

    settings = Settings(admin=AdminSettings(password_hash=hash_password("long enough pw")))
    app = create_app(FakeModelPool(), settings,
                     admin_options=AdminOptions(config_file=tmp_path / "c.toml"))  # fmt: skip
    with running_server(app, settings) as live:
        # No API key is set, so no key can stand in for the admin's login.
        resp = httpx.get(f"{live.base_url}/admin/api/settings", headers={"x-api-key": "x"})
        assert resp.status_code == 401


def test_a_live_key_the_pool_refuses_is_saved_and_says_so(open_server) -> None:
    client = httpx.Client(base_url=open_server.base_url)
    headers = {"x-csrf-token": _csrf(client)}
    resp = client.put("/admin/api/settings", json={"key": "models.pinned", "value": "nope"},
                      headers=headers)  # fmt: skip
    assert resp.status_code in (400, 404)
    assert "nope" in resp.json()["error"]["message"]
