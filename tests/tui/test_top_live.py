"""`omlx top` against a live server on loopback, driven by real requests on a tiny model."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from omlx.cli.main import app as cli_app
from omlx.pool.pool import LocalModelPool
from omlx.server.app import create_app
from omlx.settings import EngineSettings, Settings
from omlx.tui.app import TopApp
from omlx.tui.client import OmlxClient
from omlx.tui.widgets.summary import Summary
from omlx.tui.widgets.tables import ModelsTable
from tests.fixtures.live_server import LiveServer, running_server

pytestmark = pytest.mark.timeout(240)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _settings() -> Settings:
    return Settings(engine=EngineSettings(default_model="tiny", max_running=8))


@pytest.fixture
def live(tiny_llama_dir: Path) -> Iterator[LiveServer]:
    settings = _settings()
    pool = LocalModelPool(settings, models={"tiny": tiny_llama_dir})
    app = create_app(pool, settings, close_pool_on_shutdown=True, stats_interval_s=0.2)
    with running_server(app, settings) as server:
        yield server


def _fire_requests(base_url: str, n: int, max_tokens: int = 24) -> threading.Thread:
    def run() -> None:
        with httpx.Client(timeout=120) as http:
            for i in range(n):
                http.post(
                    f"{base_url}/v1/chat/completions",
                    json={
                        "model": "tiny",
                        "max_tokens": max_tokens,
                        "temperature": 0,
                        "messages": [{"role": "user", "content": f"tell me a story {i}"}],
                    },
                )

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


async def _wait_for(pilot, predicate, timeout_s: float = 60.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not met in time")
        await pilot.pause(0.1)


def _text(app: TopApp, selector: str) -> str:
    return str(app.query_one(selector).render())


@pytest.mark.anyio
async def test_numbers_move_when_requests_run(live: LiveServer) -> None:
    app = TopApp(OmlxClient(live.base_url))
    async with app.run_test(size=(80, 24)) as pilot:
        await _wait_for(pilot, lambda: app.snapshot is not None)
        assert app.snapshot.requests_total == 0
        before = _text(app.query_one(Summary), "#requests")
        assert "0 total" in before
        thread = _fire_requests(live.base_url, 3)
        await _wait_for(pilot, lambda: app.snapshot.requests_total >= 3, timeout_s=180)
        await pilot.pause(0.5)
        after = _text(app.query_one(Summary), "#requests")
        assert "3 total" in after, after
        assert app.history.peak_generation() > 0
        table = app.query_one(ModelsTable)
        assert table.row_count == 1 and table.selected_key() == "tiny"
        thread.join(timeout=60)


@pytest.mark.anyio
async def test_unload_key_unloads_the_selected_model(live: LiveServer) -> None:
    _fire_requests(live.base_url, 1, max_tokens=2).join(timeout=120)
    app = TopApp(OmlxClient(live.base_url))
    async with app.run_test(size=(80, 24)) as pilot:
        await _wait_for(
            pilot, lambda: app.snapshot is not None and any(m.loaded for m in app.snapshot.models)
        )
        await pilot.press("u")
        await _wait_for(pilot, lambda: "unload tiny" in _text(app, "#message"))
        assert "ok" in _text(app, "#message"), _text(app, "#message")
        await _wait_for(pilot, lambda: not any(m.loaded for m in app.snapshot.models))
    resp = await asyncio.to_thread(httpx.get, f"{live.base_url}/v1/models/status", timeout=10)
    status = resp.json()
    assert not any(m.get("loaded") for m in status["data"])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.anyio
async def test_disconnect_and_reconnect(tiny_llama_dir: Path) -> None:
    settings = _settings()
    port = _free_port()

    def serve():
        pool = LocalModelPool(settings, models={"tiny": tiny_llama_dir})
        app = create_app(pool, settings, close_pool_on_shutdown=True, stats_interval_s=0.2)
        return running_server(app, settings, port=port)

    server = serve()
    server.__enter__()
    app = TopApp(OmlxClient(f"http://127.0.0.1:{port}"), reconnect_s=0.2)
    async with app.run_test(size=(80, 24)) as pilot:
        await _wait_for(pilot, lambda: app.connected)
        await asyncio.to_thread(server.__exit__, None, None, None)
        await _wait_for(pilot, lambda: not app.connected)
        assert "server unavailable" in _text(app, "#status")
        server = serve()
        await asyncio.to_thread(server.__enter__)
        try:
            await _wait_for(pilot, lambda: app.connected)
            await pilot.pause(0.5)
            assert "unavailable" not in _text(app, "#status")
        finally:
            await asyncio.to_thread(server.__exit__, None, None, None)


def test_batch_mode_prints_frames(live: LiveServer) -> None:
    _fire_requests(live.base_url, 1, max_tokens=4).join(timeout=120)
    result = CliRunner().invoke(
        cli_app, ["top", "--batch", "-n", "2", "--delay", "0.2", "--url", live.base_url]
    )
    assert result.exit_code == 0, result.output
    frames = [f for f in result.output.split("\n\n\n") if f.strip()]
    assert result.output.count("throughput:") == 2
    assert "requests: 0 running, 0 queued, 1 total" in frames[0]
    assert "tiny" in result.output and "memory:" in result.output


def test_batch_mode_without_server_fails_clearly() -> None:
    port = _free_port()
    result = CliRunner().invoke(cli_app, ["top", "--batch", "--url", f"http://127.0.0.1:{port}"])
    assert result.exit_code == 1
    assert "server unavailable" in result.output
