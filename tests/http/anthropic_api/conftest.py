"""Anthropic API tests: a FakeModelPool behind a live server, the official anthropic client."""

from __future__ import annotations

from collections.abc import Iterator

import anthropic
import pytest

from omlx.settings import Settings
from tests.fixtures.fake_pool import FakeModelPool
from tests.fixtures.live_server import LiveServer, running_server


@pytest.fixture
def pool() -> FakeModelPool:
    return FakeModelPool(models=("fake-model", "other-model"))


@pytest.fixture
def settings() -> Settings:
    return Settings()


@pytest.fixture
def server(pool: FakeModelPool, settings: Settings) -> Iterator[LiveServer]:
    with running_server(pool, settings) as live:
        yield live


@pytest.fixture
def client(server: LiveServer) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.base_url, api_key="unused", max_retries=0)
