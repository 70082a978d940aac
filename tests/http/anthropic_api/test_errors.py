"""Anthropic error shapes and statuses, through the official client and raw HTTP."""

from __future__ import annotations

import anthropic
import httpx
import pytest

from omlx.errors import Overloaded
from omlx.settings import ServerSettings, Settings
from tests.fixtures.fake_pool import FakeModelPool
from tests.fixtures.live_server import LiveServer, running_server

USER = [{"role": "user", "content": "hi"}]


def test_unknown_model_is_404(client: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.NotFoundError) as info:
        client.messages.create(model="nope", max_tokens=5, messages=USER)
    assert info.value.body["type"] == "error"
    assert info.value.body["error"]["type"] == "not_found_error"


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ({"model": "fake-model", "messages": USER}, "max_tokens"),
        ({"model": "fake-model", "max_tokens": 0, "messages": USER}, "max_tokens"),
        (
            {"model": "fake-model", "max_tokens": 5, "messages": [{"role": "bot", "content": "x"}]},
            "role",
        ),
        ({"model": "fake-model", "max_tokens": 5, "messages": []}, "messages"),
        (
            {
                "model": "fake-model",
                "max_tokens": 100,
                "messages": USER,
                "thinking": {"type": "enabled", "budget_tokens": 100},
            },
            "budget_tokens",
        ),
        (
            {"model": "fake-model", "max_tokens": 5, "messages": USER, "stop_sequences": [""]},
            "stop_sequences",
        ),
    ],
)
def test_bad_bodies_are_400(server: LiveServer, body: dict, needle: str) -> None:
    response = httpx.post(f"{server.base_url}/v1/messages", json=body)
    assert response.status_code == 400
    error = response.json()
    assert error["type"] == "error"
    assert error["error"]["type"] == "invalid_request_error"
    assert needle in error["error"]["message"]


def test_sdk_raises_bad_request(client: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.BadRequestError):
        client.messages.create(
            model="fake-model",
            max_tokens=10,
            messages=USER,
            thinking={"type": "enabled", "budget_tokens": 10},
        )


def test_overloaded_is_529(pool: FakeModelPool, client: anthropic.Anthropic) -> None:
    pool.error = Overloaded("queue full", retry_after_s=2)
    with pytest.raises(anthropic.APIStatusError) as info:
        client.messages.create(model="fake-model", max_tokens=5, messages=USER)
    assert info.value.status_code == 529
    assert info.value.body["error"]["type"] == "overloaded_error"
    assert info.value.response.headers["retry-after"] == "2"


def test_overloaded_stream_is_529_before_it_starts(
    pool: FakeModelPool, client: anthropic.Anthropic
) -> None:
    pool.error = Overloaded("queue full")
    with pytest.raises(anthropic.APIStatusError) as info:
        client.messages.create(model="fake-model", max_tokens=5, messages=USER, stream=True)
    assert info.value.status_code == 529


@pytest.mark.parametrize("header", ["x-api-key", "authorization"])
def test_api_key_by_x_api_key_or_bearer(header: str) -> None:
    pool = FakeModelPool()
    with running_server(pool, Settings(server=ServerSettings(api_key="s3cret"))) as live:
        good = anthropic.Anthropic(base_url=live.base_url, max_retries=0, api_key="s3cret")
        if header == "authorization":
            good = anthropic.Anthropic(base_url=live.base_url, max_retries=0, auth_token="s3cret")
        assert good.messages.create(model="fake-model", max_tokens=5, messages=USER).content
        bad = anthropic.Anthropic(base_url=live.base_url, max_retries=0, api_key="wrong")
        with pytest.raises(anthropic.AuthenticationError) as info:
            bad.messages.create(model="fake-model", max_tokens=5, messages=USER)
        assert info.value.body["error"]["type"] == "authentication_error"
        assert "s3cret" not in info.value.response.text
        response = httpx.post(
            f"{live.base_url}/v1/messages/count_tokens",
            json={"model": "fake-model", "messages": USER},
        )
        assert response.status_code == 401
