"""Client-controlled text cannot forge log lines; clients that leave are not server errors."""

from __future__ import annotations

import logging
import sys
import time

import httpx
import pytest

from omlx.server.request_log import SafeFormatter
from tests.fixtures.fake_pool import FakeModelPool, text_script
from tests.fixtures.live_server import LiveServer

CHAT = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]}


def _access_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "omlx.server.access"]


def _wait_for(predicate, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


@pytest.mark.parametrize(
    ("raw", "escaped"),
    [("x%0AFORGED%20GET%20/v1/x", "x\\x0aFORGED"), ("x%1b[31mred", "x\\x1b[31mred"),
     ("x%E2%80%A8y", "x\\u2028y"), ("x%0D%0A", "x\\x0d\\x0a")],
)  # fmt: skip
def test_paths_with_control_characters_are_escaped(
    server: LiveServer, caplog: pytest.LogCaptureFixture, raw: str, escaped: str
) -> None:
    caplog.set_level(logging.INFO, logger="omlx.server.access")
    r = httpx.get(f"{server.base_url}/v1/models/{raw}")
    assert r.status_code == 404
    _wait_for(lambda: any(escaped in line for line in _access_lines(caplog)))
    for line in _access_lines(caplog):
        assert not any(ord(c) < 32 or c in "\x7f\u2028" for c in line), repr(line)


def test_model_names_in_request_bodies_are_escaped(
    server: LiveServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="omlx.server.access")
    body = {**CHAT, "model": "m\nINFO forged line\x1b[2J"}
    assert httpx.post(f"{server.base_url}/v1/chat/completions", json=body).status_code == 404
    _wait_for(lambda: any("forged" in line for line in _access_lines(caplog)))
    line = next(line for line in _access_lines(caplog) if "forged" in line)
    assert "model=m\\x0aINFO forged line\\x1b[2J" in line


def test_formatter_escapes_every_message_but_keeps_tracebacks() -> None:
    formatter = SafeFormatter("%(levelname)s %(message)s")
    try:
        raise ValueError("boom")
    except ValueError:
        exc_info = sys.exc_info()
    record = logging.LogRecord(
        "x", logging.ERROR, __file__, 1, "loading %s", ("evil\nWARNING forged",), exc_info
    )
    text = formatter.format(record)
    head, _, trace = text.partition("\n")
    assert head == "ERROR loading evil\\x0aWARNING forged"
    assert trace.startswith("Traceback") and "ValueError: boom" in trace


def _disconnect_non_streamed(live: LiveServer, path: str, body: dict) -> None:
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(live.base_url + path, json=body, timeout=0.5)


@pytest.mark.parametrize(
    ("path", "body"),
    [("/v1/chat/completions", CHAT),
     ("/v1/responses", {"model": "fake-model", "input": "hi", "max_output_tokens": None})],
)  # fmt: skip
def test_client_that_leaves_is_a_disconnect_not_an_error(
    pool: FakeModelPool,
    server: LiveServer,
    caplog: pytest.LogCaptureFixture,
    path: str,
    body: dict,
) -> None:
    caplog.set_level(logging.INFO)
    before = httpx.get(server.base_url + "/api/stats").json()["http"]
    pool.script_for = lambda req: text_script(["Hello"], first_token_delay_s=30.0)
    _disconnect_non_streamed(server, path, body)
    # The slot is freed at once: the engine request is cancelled, not left to run 2048 tokens.
    assert pool.wait_cancelled(2.0) == [pool.requests[0].request_id]
    _wait_for(lambda: any(path in line for line in _access_lines(caplog)))
    line = next(line for line in _access_lines(caplog) if path in line)
    assert "status=499" in line and "finish=disconnected" in line
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    after = httpx.get(server.base_url + "/api/stats").json()["http"]
    assert after["client_disconnects_total"] == before["client_disconnects_total"] + 1
    assert after["server_errors_total"] == before["server_errors_total"]


def test_stream_left_midway_is_counted_as_a_disconnect(
    pool: FakeModelPool, server: LiveServer
) -> None:
    before = httpx.get(server.base_url + "/api/stats").json()["http"]
    pool.script_for = lambda req: text_script(["Hello"] * 200, token_delay_s=0.05)
    body = {**CHAT, "stream": True}
    with httpx.stream("POST", server.base_url + "/v1/chat/completions", json=body) as r:
        for line in r.iter_lines():
            if '"Hello"' in line:
                break
    assert pool.wait_cancelled(5.0) == [pool.requests[0].request_id]

    def counted() -> bool:
        http = httpx.get(server.base_url + "/api/stats").json()["http"]
        return http["client_disconnects_total"] == before["client_disconnects_total"] + 1

    _wait_for(counted)
