"""Streamed /v1/messages: Anthropic's exact event sequence, pings, in-stream errors."""

from __future__ import annotations

import json

import anthropic
import httpx

from omlx.engine.api import Failed, Started, ToolCall
from omlx.errors import Overloaded
from omlx.settings import ServerSettings, Settings
from tests.fixtures.fake_pool import NO_ID, FakeModelPool, text_script
from tests.fixtures.live_server import LiveServer, running_server

USER = [{"role": "user", "content": "hi"}]


def sse_events(server: LiveServer, body: dict) -> list[tuple[str, dict]]:
    """(event name, data) pairs of one streamed request, read raw."""
    events = []
    with httpx.stream(
        "POST", f"{server.base_url}/v1/messages", json={**body, "stream": True}, timeout=30
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        name = None
        for line in response.iter_lines():
            if line.startswith("event: "):
                name = line.removeprefix("event: ")
            elif line.startswith("data: "):
                data = json.loads(line.removeprefix("data: "))
                assert data["type"] == name
                events.append((name, data))
    return events


def test_exact_event_sequence(pool: FakeModelPool, server: LiveServer) -> None:
    call = ToolCall(id="call_9", name="f", arguments='{"x": 1}')
    pool.script_for = lambda req: text_script(
        ["A", "B"],
        reasoning=["r1", "r2"],
        tool_calls=[call],
        prompt_tokens=9,
        cached_tokens=4,
        token_delay_s=0.02,
    )
    events = sse_events(server, {"model": "fake-model", "max_tokens": 50, "messages": USER})
    names = [name for name, _ in events]
    assert names == [
        "message_start",
        "ping",
        "content_block_start",  # thinking
        "content_block_delta",
        "content_block_delta",
        "content_block_delta",  # signature
        "content_block_stop",
        "content_block_start",  # text
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "content_block_start",  # tool_use
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    start = events[0][1]["message"]
    assert start["usage"]["input_tokens"] == 5
    assert start["usage"]["cache_read_input_tokens"] == 4
    assert (start["stop_reason"], start["content"]) == (None, [])
    blocks = [d["content_block"] for n, d in events if n == "content_block_start"]
    assert [b["type"] for b in blocks] == ["thinking", "text", "tool_use"]
    assert [d["index"] for n, d in events if n == "content_block_start"] == [0, 1, 2]
    deltas = [d["delta"] for n, d in events if n == "content_block_delta"]
    assert [d["type"] for d in deltas] == [
        "thinking_delta",
        "thinking_delta",
        "signature_delta",
        "text_delta",
        "text_delta",
        "input_json_delta",
    ]
    assert json.loads(deltas[-1]["partial_json"]) == {"x": 1}
    assert blocks[2]["id"] == "toolu_9" and blocks[2]["input"] == {}
    final = events[-2][1]
    assert final["delta"] == {"stop_reason": "tool_use", "stop_sequence": None}
    assert final["usage"]["output_tokens"] == 5


def test_sdk_stream_accumulates_the_message(
    pool: FakeModelPool, client: anthropic.Anthropic
) -> None:
    pool.script_for = lambda req: text_script(["Hel", "lo"], reasoning=["hm"], prompt_tokens=6)
    with client.messages.stream(
        model="fake-model",
        max_tokens=64,
        messages=USER,
        thinking={"type": "enabled", "budget_tokens": 32},
    ) as stream:
        text = "".join(stream.text_stream)
        message = stream.get_final_message()
    assert text == "Hello"
    assert [b.type for b in message.content] == ["thinking", "text"]
    assert message.content[0].thinking == "hm" and message.content[0].signature
    assert message.stop_reason == "end_turn"
    assert (message.usage.input_tokens, message.usage.output_tokens) == (6, 3)


def test_pings_while_the_first_token_is_pending(pool: FakeModelPool) -> None:
    pool.script_for = lambda req: text_script(["x"], first_token_delay_s=0.6)
    settings = Settings(server=ServerSettings(keepalive_interval_s=0.1))
    with running_server(pool, settings) as live:
        events = sse_events(live, {"model": "fake-model", "max_tokens": 5, "messages": USER})
    names = [name for name, _ in events]
    assert names[0] == "message_start"
    first_block = names.index("content_block_start")
    assert names[1:first_block] == ["ping"] * (first_block - 1)
    assert first_block - 1 >= 3


def test_error_after_stream_started_is_an_error_event(pool: FakeModelPool, server) -> None:
    pool.script_for = lambda req: [Started(NO_ID, 3), 0.3, Failed(NO_ID, Overloaded("busy"))]
    events = sse_events(server, {"model": "fake-model", "max_tokens": 5, "messages": USER})
    assert events[0][0] == "message_start"
    assert events[-1] == (
        "error",
        {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}},
    )
