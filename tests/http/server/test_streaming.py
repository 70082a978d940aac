"""SSE keep-alive while the first token is pending, and client disconnects → cancel."""

from __future__ import annotations

import json
import logging
import re
import time

import httpx
import openai
import pytest

from omlx.settings import ServerSettings, Settings
from tests.fixtures.fake_pool import FakeModelPool, text_script
from tests.fixtures.live_server import running_server

CHAT = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "stream": True}
PROMPT = {"model": "fake-model", "prompt": "hi", "stream": True}


def _timed_lines(url: str, body: dict) -> list[tuple[float, str]]:
    start = time.monotonic()
    out = []
    with httpx.stream("POST", url, json=body, timeout=10) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line:
                out.append((time.monotonic() - start, line))
    return out


def _first_content_at(lines: list[tuple[float, str]]) -> float:
    for t, line in lines:
        if line.startswith("data: {") and '"Hello"' in line:
            return t
    raise AssertionError("no content")


def _server(pool: FakeModelPool, mode: str):
    settings = Settings(server=ServerSettings(keepalive_mode=mode, keepalive_interval_s=0.2))
    return running_server(pool, settings)


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
def test_comment_keepalive_at_once_then_every_interval(pool: FakeModelPool, path: str) -> None:
    pool.script_for = lambda req: text_script(["Hello"], first_token_delay_s=1.0)
    with _server(pool, "comment") as live:
        lines = _timed_lines(live.base_url + path, CHAT if "chat" in path else PROMPT)
    first = _first_content_at(lines)
    pings = [t for t, line in lines if line == ": keep-alive" and t < first]
    # Event order, not wall-clock bounds: the first frame is a ping (sent at once, before
    # the 1 s prefill ends), and the interval repeats it while the prefill runs.
    first_frame = next(line for _, line in lines)
    assert first_frame == ": keep-alive"
    assert len(pings) >= 3  # ~1 s of prefill / 0.2 s interval (5 on an idle machine)


def test_keepalive_resumes_when_tokens_stall_and_pauses_while_they_flow(
    pool: FakeModelPool,
) -> None:
    # Tokens every 0.05 s (a quarter of the 0.2 s interval), a 1 s stall, then more.
    steps = text_script(["Hello"] + ["a"] * 10 + ["b"] * 3, token_delay_s=0.05)
    stall_at = steps.index(next(x for x in steps if getattr(x, "text", None) == "b"))
    steps.insert(stall_at, 1.0)
    pool.script_for = lambda req: steps
    with _server(pool, "comment") as live:
        lines = _timed_lines(live.base_url + "/v1/chat/completions", CHAT)
    token_at = [t for t, line in lines if line.startswith("data: {") and '"content"' in line]
    flowing = (_first_content_at(lines), next(t for t, ln in lines if '"b"' in ln))
    pings = [t for t, line in lines if line == ": keep-alive" and flowing[0] < t < flowing[1]]
    assert len(token_at) >= 14
    assert 3 <= len(pings) <= 6  # ~1 s stall / 0.2 s interval
    last_a = max(t for t, ln in lines if '"a"' in ln)
    assert all(p > last_a for p in pings)  # none while tokens kept coming


def test_chunk_keepalive_is_an_empty_openai_chunk(pool: FakeModelPool) -> None:
    pool.script_for = lambda req: text_script(["Hello"], first_token_delay_s=0.8)
    with _server(pool, "chunk") as live:
        lines = _timed_lines(live.base_url + "/v1/chat/completions", CHAT)
        first = _first_content_at(lines)
        early = [json.loads(line[6:]) for t, line in lines if t < first]
        assert len(early) >= 3
        for chunk in early:
            assert chunk["object"] == "chat.completion.chunk"
            assert chunk["choices"][0]["delta"] in ({}, {"role": "assistant", "content": ""})
        assert not any(line.startswith(":") for _, line in lines)
        # The official client accepts the empty chunks.
        client = openai.OpenAI(base_url=live.openai_base_url, api_key="x", max_retries=0)
        stream = client.chat.completions.create(**CHAT)
        assert "".join(c.choices[0].delta.content or "" for c in stream) == "Hello"


def test_chunk_keepalive_for_completions(pool: FakeModelPool) -> None:
    pool.script_for = lambda req: text_script(["Hello"], first_token_delay_s=0.6)
    with _server(pool, "chunk") as live:
        lines = _timed_lines(live.base_url + "/v1/completions", PROMPT)
    first = _first_content_at(lines)
    early = [json.loads(line[6:]) for t, line in lines if t < first]
    assert len(early) >= 2
    assert all(c["object"] == "text_completion" and c["choices"][0]["text"] == "" for c in early)


def test_keepalive_off_sends_nothing_before_the_first_token(pool: FakeModelPool) -> None:
    pool.script_for = lambda req: text_script(["Hello"], first_token_delay_s=0.8)
    with _server(pool, "off") as live:
        lines = _timed_lines(live.base_url + "/v1/chat/completions", CHAT)
    first = _first_content_at(lines)
    assert first > 0.7
    before = [line for t, line in lines if t < first - 0.05]
    assert not [line for line in before if line.startswith(":") or '"delta":{}' in line]


def _wait_until(predicate, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return False


def test_disconnect_mid_stream_cancels_the_request(
    pool: FakeModelPool, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="omlx.server.access")
    pool.script_for = lambda req: text_script(["Hello"] * 200, token_delay_s=0.05)
    with _server(pool, "comment") as live:
        with httpx.stream("POST", live.base_url + "/v1/chat/completions", json=CHAT) as r:
            for line in r.iter_lines():
                if '"Hello"' in line:
                    break
        cancelled = pool.wait_cancelled(5.0)
        assert cancelled == [pool.requests[0].request_id]
        assert _wait_until(lambda: pool.finished == cancelled)  # the engine iterator closed
        assert _wait_until(lambda: "finish=disconnected" in caplog.text)
        # The tokens it streamed before the client left are counted, not logged as 0.
        streamed = re.search(r"completion_tokens=(\d+) .*finish=disconnected", caplog.text)
        assert streamed is not None and int(streamed[1]) >= 1


def test_disconnect_while_first_token_pending_cancels(pool: FakeModelPool) -> None:
    pool.script_for = lambda req: text_script(["Hello"], first_token_delay_s=30.0)
    with _server(pool, "comment") as live:
        with httpx.stream("POST", live.base_url + "/v1/completions", json=PROMPT) as r:
            for line in r.iter_lines():
                if line == ": keep-alive":
                    break
        assert pool.wait_cancelled(5.0) == [pool.requests[0].request_id]


def test_disconnect_of_non_streamed_request_cancels(pool: FakeModelPool) -> None:
    pool.script_for = lambda req: text_script(["Hello"], first_token_delay_s=30.0)
    with _server(pool, "comment") as live:
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(
                live.base_url + "/v1/chat/completions", json={**CHAT, "stream": False}, timeout=0.5
            )
        assert pool.wait_cancelled(5.0) == [pool.requests[0].request_id]


def test_finished_requests_are_not_cancelled(pool: FakeModelPool) -> None:
    with _server(pool, "comment") as live:
        client = openai.OpenAI(base_url=live.openai_base_url, api_key="x", max_retries=0)
        list(client.chat.completions.create(**CHAT))
        client.chat.completions.create(**{**CHAT, "stream": False})
        assert _wait_until(lambda: len(pool.finished) == 2)
    assert pool.cancelled == []
