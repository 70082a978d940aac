"""Server tests: a FakeModelPool behind a real uvicorn server on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

from omlx.settings import ServerSettings, Settings
from tests.fixtures.fake_pool import FakeModelPool
from tests.fixtures.live_server import LiveServer, running_server


@pytest.fixture(scope="module")
def _shared() -> Iterator[tuple[FakeModelPool, LiveServer]]:
    # One server per module keeps the suite fast; `pool` resets the fake per test.
    pool = FakeModelPool(models=("fake-model", "other-model"))
    with running_server(pool, Settings(), stats_interval_s=0.1) as live:
        yield pool, live


@pytest.fixture
def pool(_shared: tuple[FakeModelPool, LiveServer]) -> FakeModelPool:
    _shared[0].reset()
    return _shared[0]


@pytest.fixture
def server(_shared: tuple[FakeModelPool, LiveServer], pool: FakeModelPool) -> LiveServer:
    return _shared[1]


@pytest.fixture
def client(server: LiveServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.openai_base_url, api_key="unused", max_retries=0)


def settings_with(**server: object) -> Settings:
    return Settings(server=ServerSettings(**server))  # type: ignore[arg-type]
