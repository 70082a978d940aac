"""Responses API tests: a FakeModelPool behind a live server, the official openai client."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

from omlx.settings import AgentSettings, Settings
from tests.fixtures.fake_pool import FakeModelPool
from tests.fixtures.live_server import LiveServer, running_server


@pytest.fixture
def pool() -> FakeModelPool:
    return FakeModelPool(models=("fake-model",))


@pytest.fixture
def server(pool: FakeModelPool) -> Iterator[LiveServer]:
    settings = Settings(agents=AgentSettings(max_stored_responses=2))
    with running_server(pool, settings) as live:
        yield live


@pytest.fixture
def client(server: LiveServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.openai_base_url, api_key="unused", max_retries=0)
