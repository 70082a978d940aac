"""The published OpenAPI schema covers every route, and schemathesis fuzzes the live server
against it: any 5xx, undocumented status, wrong content type, response that breaks its
schema, accepted invalid body, or request that hangs fails the run."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from omlx.settings import ServerSettings, Settings
from tests.fixtures.fake_pool import FakeModelPool
from tests.fixtures.live_server import LiveServer, running_server

KEY = "sk-fuzz"
CHECKS = (
    "not_a_server_error,status_code_conformance,content_type_conformance,"
    "response_schema_conformance,negative_data_rejection"
)
# Endless by design (one stats frame per second until the client leaves).
ENDLESS = "/api/stats/stream"
DOCS_ROUTES = {"/", "/docs", "/openapi.json", "/{path}"}


@pytest.fixture(scope="module")
def keyed() -> Iterator[LiveServer]:
    pool = FakeModelPool(models=("fake-model", "other-model"))
    with running_server(pool, Settings(server=ServerSettings(api_key=KEY))) as live:
        yield live


def _get(live: LiveServer, path: str) -> httpx.Response:
    return httpx.get(live.base_url + path, headers={"authorization": f"Bearer {KEY}"})


def test_schema_documents_every_route_with_real_bodies(keyed: LiveServer) -> None:
    schema = _get(keyed, "/openapi.json").json()
    assert schema["openapi"].startswith("3.1")
    registered = {
        (m.lower(), r.path_format)
        for r in keyed.app.routes
        for m, (handler, _) in r.route_handler_map.items()
        if m != "OPTIONS" and handler.resolve_include_in_schema()
    }
    assert not {p for _, p in registered} & DOCS_ROUTES
    documented = {(m, p) for p, item in schema["paths"].items() for m in item}
    assert registered == documented
    components = schema["components"]["schemas"]
    for path, item in schema["paths"].items():
        for method, op in item.items():
            assert "4XX" in op["responses"] and "500" not in op["responses"], (method, path)
            if path.startswith("/admin/"):
                continue  # the admin's JSON API: Litestar's own schemas of its handlers
            ok = op["responses"]["200"]["content"]
            assert ok, (method, path)
            for media in ok.values():
                ref = media["schema"].get("$ref")
                assert ref is None or ref.rsplit("/", 1)[-1] in components, ref
            if method == "post" and not path.startswith(("/v1/models/", "/api/cache")):
                body = op["requestBody"]["content"]["application/json"]["schema"]["$ref"]
                assert body.rsplit("/", 1)[-1] in components
    chat = components["ChatCompletionRequest"]
    assert {"model", "messages", "max_tokens", "tools", "stream"} <= set(chat["properties"])
    assert components["ErrorBody"]["required"] == ["error"]
    assert "ApiError" in components  # the Anthropic routes' error shape


def test_docs_page_is_offline(keyed: LiveServer) -> None:
    for path in ("/docs", "/"):
        r = _get(keyed, path)
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
        page = r.text
        assert "/v1/chat/completions" in page and "ChatCompletionRequest" in page
        assert "<script" not in page.lower() and "<link" not in page.lower()
        assert not re.search(r"(src|href)\s*=\s*['\"]?(https?:)?//", page), "external asset"


def test_schema_and_docs_need_the_key(keyed: LiveServer) -> None:
    for path in ("/openapi.json", "/docs"):
        assert httpx.get(keyed.base_url + path).status_code == 401


def _fuzz(live: LiveServer, max_examples: int, seed: int, *extra: str, cwd: Path) -> dict:
    before = _get(live, "/api/stats").json()["http"]
    run = subprocess.run(
        [sys.executable, "-m", "schemathesis.cli", "run", f"{live.base_url}/openapi.json",
         "--checks", CHECKS, "--exclude-path", ENDLESS, "--max-examples", str(max_examples),
         "--request-timeout", "10", "--workers", "2", "--seed", str(seed),
         "--header", f"Authorization: Bearer {KEY}", "--continue-on-failure", *extra],
        capture_output=True, text=True, timeout=900, cwd=cwd,
    )  # fmt: skip
    after = _get(live, "/api/stats").json()["http"]
    figures = {
        "requests": after["requests_total"] - before["requests_total"],
        "server_errors": after["server_errors_total"] - before["server_errors_total"],
    }
    print("schemathesis:", json.dumps(figures))
    assert run.returncode == 0, run.stdout[-8000:] + run.stderr[-2000:]
    assert figures["server_errors"] == 0
    return figures


def test_fuzz_bounded(keyed: LiveServer, tmp_path: Path) -> None:
    figures = _fuzz(keyed, 5, 1, "--phases", "coverage,fuzzing", cwd=tmp_path)
    assert figures["requests"] > 500


@pytest.mark.soak
@pytest.mark.timeout(1200)
def test_fuzz_long(keyed: LiveServer, tmp_path: Path) -> None:
    figures = _fuzz(keyed, 150, 2, cwd=tmp_path)
    assert figures["requests"] > 3000
