"""Every streamed dialect shares one frame loop (generation.event_frames): a failure while
rendering an event reaches the client as an in-stream error event, not a cut connection."""

from __future__ import annotations

import httpx

from omlx.engine.api import RequestId, Started, Token, ToolCall
from tests.fixtures.fake_pool import FakeModelPool
from tests.fixtures.live_server import LiveServer

# A tool call whose arguments cannot be rendered: every dialect serializes them.
BROKEN = Token(
    RequestId(""),
    text="",
    token_ids=[1],
    tool_calls=[ToolCall(id="call_1", name="f", arguments=object())],  # type: ignore[arg-type]
)


def _events(server: LiveServer, path: str, body: dict) -> tuple[int, list[str]]:
    with httpx.stream("POST", f"{server.base_url}{path}", json=body, timeout=30) as r:
        lines = [line for line in r.iter_lines() if line]
    return r.status_code, lines


def test_anthropic_render_failure_is_an_error_event(
    pool: FakeModelPool, server: LiveServer
) -> None:
    pool.script_for = lambda req: [Started(RequestId(""), 3), BROKEN]
    body = {
        "model": "fake-model",
        "max_tokens": 16,
        "stream": True,
        "messages": [{"role": "user", "content": "hi"}],
    }
    status, lines = _events(server, "/v1/messages", body)
    assert status == 200
    assert "event: message_start" in lines
    assert lines[-2] == "event: error", lines
    assert '"type":"error"' in lines[-1].replace(" ", "")


def test_responses_render_failure_is_an_error_event(
    pool: FakeModelPool, server: LiveServer
) -> None:
    pool.script_for = lambda req: [Started(RequestId(""), 3), BROKEN]
    body = {"model": "fake-model", "input": "hi", "stream": True}
    status, lines = _events(server, "/v1/responses", body)
    assert status == 200
    assert "event: response.created" in lines
    assert lines[-2] == "event: response.failed", lines
