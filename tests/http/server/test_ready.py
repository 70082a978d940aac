"""GET /ready: 200 once the default model is loaded, 503 before; /health stays liveness."""

from __future__ import annotations

import httpx
import pytest

from tests.fixtures.fake_pool import FakeModelPool
from tests.fixtures.live_server import LiveServer


@pytest.mark.parametrize(
    ("state", "status_code", "status"),
    [("loaded", 200, "ready"), ("loading", 503, "loading"), ("available", 503, "not_loaded")],
)
def test_ready_follows_the_default_models_state(
    pool: FakeModelPool, server: LiveServer, state: str, status_code: int, status: str
) -> None:
    pool.default_state = state
    r = httpx.get(f"{server.base_url}/ready", timeout=10)
    assert r.status_code == status_code
    assert r.json() == {"status": status, "default_model": "fake-model", "error": None}
    health = httpx.get(f"{server.base_url}/health", timeout=10)
    assert health.status_code == 200 and health.json()["status"] == "ok"  # liveness only
