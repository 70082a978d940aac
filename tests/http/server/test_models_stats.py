"""/v1/models, /health, /api/stats and its SSE stream, CORS, request log line."""

from __future__ import annotations

import json
import logging
import time

import httpx
import msgspec
import openai
import pytest

from omlx.schemas.stats import StatsSnapshot
from omlx.settings import ServerSettings, Settings
from tests.fixtures.fake_pool import FakeModelPool
from tests.fixtures.live_server import LiveServer, running_server


def test_models_list_with_type_and_status(client: openai.OpenAI, server: LiveServer) -> None:
    models = client.models.list()
    assert [m.id for m in models.data] == ["fake-model", "other-model"]
    raw = httpx.get(f"{server.base_url}/v1/models").json()["data"]
    assert [(m["type"], m["status"]) for m in raw] == [("llm", "loaded"), ("llm", "available")]
    assert client.models.retrieve("other-model").id == "other-model"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("missing")


def test_health(server: LiveServer) -> None:
    body = httpx.get(f"{server.base_url}/health").json()
    assert body["status"] == "ok" and body["version"]


def test_stats_snapshot_decodes_into_the_shared_schema(server: LiveServer) -> None:
    r = httpx.get(f"{server.base_url}/api/stats")
    snap = msgspec.json.decode(r.content, type=StatsSnapshot)
    assert [m.model for m in snap.models] == ["fake-model", "other-model"]


def test_stats_stream_sends_snapshots_periodically(server: LiveServer) -> None:
    stamps = []
    start = time.monotonic()
    with httpx.stream("GET", f"{server.base_url}/api/stats/stream", timeout=5) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            if line.startswith("data: "):
                msgspec.json.decode(line[6:].encode(), type=StatsSnapshot)
                stamps.append(time.monotonic() - start)
            if len(stamps) == 3:
                break
    assert stamps[0] < 0.5 and stamps[2] >= 0.15  # interval 0.1 s in these tests


def test_cors_closed_by_default(server: LiveServer) -> None:
    r = httpx.options(
        f"{server.base_url}/v1/models",
        headers={"Origin": "http://evil.example", "Access-Control-Request-Method": "GET"},
    )
    assert "access-control-allow-origin" not in r.headers


def test_cors_open_for_configured_origins(pool: FakeModelPool) -> None:
    settings = Settings(server=ServerSettings(cors_origins=["http://ok.example"]))
    with running_server(pool, settings) as live:
        r = httpx.get(f"{live.base_url}/v1/models", headers={"Origin": "http://ok.example"})
        assert r.headers["access-control-allow-origin"] == "http://ok.example"
        r = httpx.get(f"{live.base_url}/v1/models", headers={"Origin": "http://evil.example"})
        assert r.headers.get("access-control-allow-origin") != "http://evil.example"


def test_one_log_line_per_request_without_prompt_text(
    server: LiveServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="omlx.server.access")
    secret_prompt = "my-very-private-prompt"
    httpx.post(
        f"{server.base_url}/v1/chat/completions",
        json={"model": "fake-model", "messages": [{"role": "user", "content": secret_prompt}]},
    )
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline and not caplog.records:
        time.sleep(0.02)
    lines = [r.getMessage() for r in caplog.records if r.name == "omlx.server.access"]
    assert len(lines) == 1
    line = lines[0]
    for part in (
        "POST /v1/chat/completions",
        "model=fake-model",
        "status=200",
        "prompt_tokens=7",
        "completion_tokens=2",
        "finish=stop",
        "duration_ms=",
    ):
        assert part in line
    assert secret_prompt not in json.dumps([r.getMessage() for r in caplog.records])
