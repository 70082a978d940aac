"""Anthropic and Responses APIs against the real engine: a tiny qwen3 checkpoint, live server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anthropic
import httpx
import openai
import pytest

from omlx.pool.pool import LocalModelPool
from omlx.server.app import create_app
from omlx.settings import EngineSettings, Settings
from tests.fixtures.live_server import LiveServer, running_server

pytestmark = pytest.mark.timeout(180)

GREEDY = {"temperature": 0.0}
TOOL = {
    "name": "get_weather",
    "description": "Weather for a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}


@pytest.fixture(scope="module")
def live(tiny_qwen3_dir: Path) -> Iterator[LiveServer]:
    settings = Settings(engine=EngineSettings(default_model="tiny"))
    pool = LocalModelPool(settings, models={"tiny": tiny_qwen3_dir})
    app = create_app(pool, settings, close_pool_on_shutdown=True)
    with running_server(app, settings) as server:
        yield server


@pytest.fixture
def client(live: LiveServer) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=live.base_url, api_key="x", max_retries=0)


def test_count_tokens_equals_reported_input_tokens(client: anthropic.Anthropic) -> None:
    request = {
        "model": "tiny",
        "system": [{"type": "text", "text": "You are terse."}],
        "messages": [{"role": "user", "content": "Count me, a fresh prompt 1234."}],
        "tools": [TOOL],
    }
    counted = client.messages.count_tokens(**request)
    message = client.messages.create(max_tokens=4, extra_body=GREEDY, **request)
    usage = message.usage
    assert counted.input_tokens > 10
    total_input = (
        usage.input_tokens + usage.cache_read_input_tokens + usage.cache_creation_input_tokens
    )
    assert total_input == counted.input_tokens
    assert 1 <= usage.output_tokens <= 4
    assert message.stop_reason in ("end_turn", "max_tokens", "tool_use")


def test_stream_matches_non_streamed_greedy_text(client: anthropic.Anthropic) -> None:
    request = {
        "model": "claude-sonnet-4-5",  # no alias: Claude names fall back to the default model
        "max_tokens": 12,
        "messages": [{"role": "user", "content": "Say something."}],
        "thinking": {"type": "disabled"},
        "extra_body": GREEDY,
    }
    message = client.messages.create(**request)
    with client.messages.stream(**request) as stream:
        streamed = stream.get_final_message()
    assert [b.type for b in streamed.content] == [b.type for b in message.content]
    text = "".join(b.text for b in message.content if b.type == "text")
    assert "".join(b.text for b in streamed.content if b.type == "text") == text
    assert streamed.usage.output_tokens == message.usage.output_tokens


def test_tool_round_trip_renders_with_the_real_template(client: anthropic.Anthropic) -> None:
    message = client.messages.create(
        model="tiny",
        max_tokens=6,
        tools=[TOOL],
        extra_body=GREEDY,
        messages=[
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Checking."},
                    {
                        "type": "tool_use",
                        "id": "toolu_1",
                        "name": "get_weather",
                        "input": {"city": "Paris"},
                    },
                ],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "22C"}],
            },
        ],
    )
    assert message.usage.output_tokens >= 1


def test_responses_api_with_previous_response_id(live: LiveServer) -> None:
    client = openai.OpenAI(base_url=live.openai_base_url, api_key="x", max_retries=0)
    first = client.responses.create(
        model="tiny", input="Hello", max_output_tokens=5, temperature=0.0
    )
    assert first.status in ("completed", "incomplete")
    assert first.usage.output_tokens >= 1
    second = client.responses.create(
        model="tiny",
        input="And again",
        max_output_tokens=5,
        temperature=0.0,
        previous_response_id=first.id,
    )
    # The second prompt holds the first turn: it is longer than the first prompt.
    assert second.usage.input_tokens > first.usage.input_tokens
    events = list(
        client.responses.create(
            model="tiny", input="Hello", max_output_tokens=5, temperature=0.0, stream=True
        )
    )
    assert events[0].type == "response.created"
    assert events[-1].type in ("response.completed", "response.incomplete")
    assert events[-1].response.output_text == first.output_text


def test_system_messages_inside_messages_are_accepted(client: anthropic.Anthropic) -> None:
    """Claude Code sends `role: system` turns mid-conversation (message and count)."""
    request = {
        "model": "tiny",
        "system": "You are terse.",
        "messages": [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello."},
            {"role": "system", "content": [{"type": "text", "text": "Reminder: be brief."}]},
            {"role": "user", "content": "Go on."},
        ],
    }
    counted = client.messages.count_tokens(**request)
    message = client.messages.create(max_tokens=3, extra_body=GREEDY, **request)
    usage = message.usage
    assert usage.input_tokens + usage.cache_read_input_tokens == counted.input_tokens
    assert counted.input_tokens > 20


def test_context_window_header_scales_reported_counts(live: LiveServer) -> None:
    base = anthropic.Anthropic(base_url=live.base_url, api_key="x", max_retries=0)
    request = {"model": "tiny", "messages": [{"role": "user", "content": "Count me."}]}
    real = base.messages.count_tokens(**request).input_tokens
    scaled = base.messages.count_tokens(
        **request,
        extra_headers={"x-omlx-context-window": "40960"},  # the model has 4096
    ).input_tokens
    assert scaled == real * 10
    bad = httpx.post(
        f"{live.base_url}/v1/messages/count_tokens",
        json=request,
        headers={"x-omlx-context-window": "lots"},
    )
    assert bad.status_code == 400 and bad.json()["error"]["type"] == "invalid_request_error"


def test_streamed_request_that_fails_validation_while_the_model_loads_is_a_plain_400(
    tiny_qwen3_dir: Path,
) -> None:
    settings = Settings(engine=EngineSettings(default_model="tiny"))
    pool = LocalModelPool(settings, models={"tiny": tiny_qwen3_dir})
    app = create_app(pool, settings, close_pool_on_shutdown=True)
    too_long = "word " * 6000  # past the tiny model's 4,096-token window
    with running_server(app, settings) as server:
        body = {
            "model": "tiny",
            "max_tokens": 8,
            "stream": True,
            "messages": [{"role": "user", "content": too_long}],
        }
        r = httpx.post(f"{server.base_url}/v1/messages", json=body, timeout=120)
    assert r.status_code == 400, r.text[:300]
    assert r.headers["content-type"].startswith("application/json")
    assert r.json()["error"]["type"] == "invalid_request_error"
    assert "4096" in r.json()["error"]["message"]


def test_models_report_their_window_where_agents_look(live: LiveServer) -> None:
    models = httpx.get(f"{live.base_url}/v1/models").json()["data"]
    card = next(m for m in models if m["id"] == "tiny")
    assert card["context_length"] == card["max_model_len"] == 4096
    one = httpx.get(f"{live.base_url}/v1/models/tiny").json()
    assert one["max_model_len"] == 4096  # Hermes Agent reads /v1/models/{id}
    status = httpx.get(f"{live.base_url}/v1/models/status").json()["data"]
    row = next(m for m in status if m["id"] == "tiny")
    assert row["context_length"] == 4096 and row["max_output_tokens"] == 1024
    assert httpx.get(f"{live.base_url}/version").json()["version"]
