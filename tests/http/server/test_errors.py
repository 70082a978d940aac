"""Errors in OpenAI's shape with the statuses of docs/architecture.md; auth; body limits."""

from __future__ import annotations

import httpx
import openai
import pytest

from omlx.engine.api import Failed, RequestId
from omlx.errors import ContextTooLong, Overloaded
from omlx.settings import ServerSettings, Settings
from tests.fixtures.fake_pool import FakeModelPool, text_script
from tests.fixtures.live_server import LiveServer, running_server

OK = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]}


def _post(server: LiveServer, body: object, path: str = "/v1/chat/completions") -> httpx.Response:
    return httpx.post(f"{server.base_url}{path}", json=body)


def _assert_openai_error(r: httpx.Response, status: int) -> dict:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["message"]
    return err


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "fake-model"}, "messages"),
        ({**OK, "messages": "hi"}, "messages"),
        ({**OK, "messages": [{"role": "wizard", "content": "hi"}]}, "messages[0].role"),
        ({**OK, "messages": [{"content": "hi"}]}, "messages[0].role"),
        ({**OK, "max_tokens": -1}, "max_tokens"),
        ({**OK, "max_tokens": "ten"}, "max_tokens"),
        ({**OK, "temperature": 5}, "temperature"),
        ({**OK, "n": 2}, "n"),
        ({**OK, "messages": []}, "messages"),
        ({**OK, "stop": ""}, "stop"),
        ({**OK, "logit_bias": {"abc": 1}}, "logit_bias"),
        (
            {**OK, "response_format": {"type": "json_schema", "json_schema": {"name": "x"}}},
            "response_format",
        ),
        ({**OK, "stream": "yes"}, "stream"),
    ],
)
def test_bad_chat_bodies_are_400(server: LiveServer, body: dict, param: str) -> None:
    err = _assert_openai_error(_post(server, body), 400)
    assert err["type"] == "invalid_request_error"
    assert err["param"] == param


def test_not_json_and_empty_body_are_400(server: LiveServer) -> None:
    for raw in (b"{not json", b"", b"[1, 2]"):
        r = httpx.post(
            f"{server.base_url}/v1/chat/completions",
            content=raw,
            headers={"content-type": "application/json"},
        )
        _assert_openai_error(r, 400)


@pytest.mark.parametrize(
    "body",
    [
        {"model": "fake-model"},
        {"model": "fake-model", "prompt": 5},
        {"model": "fake-model", "prompt": ["a", "b"]},
        {"model": "fake-model", "prompt": "hi", "max_tokens": 0},
        {"model": "fake-model", "prompt": "hi", "n": 3},
        {"model": "fake-model", "prompt": [1, 2], "echo": True},
    ],
)
def test_bad_completion_bodies_are_400(server: LiveServer, body: dict) -> None:
    _assert_openai_error(_post(server, body, "/v1/completions"), 400)


def test_openai_client_raises_bad_request(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="fake-model", messages=[], max_tokens=-5)
    assert e.value.status_code == 400


@pytest.mark.parametrize("stream", [False, True])
def test_unknown_model_is_404(client: openai.OpenAI, stream: bool) -> None:
    with pytest.raises(openai.NotFoundError) as e:
        client.chat.completions.create(
            model="no-such-model", messages=[{"role": "user", "content": "hi"}], stream=stream
        )
    assert e.value.body["code"] == "model_not_found"


def test_unknown_route_is_404_in_openai_shape(server: LiveServer) -> None:
    _assert_openai_error(httpx.get(f"{server.base_url}/v1/nothing"), 404)


@pytest.mark.parametrize("stream", [False, True])
def test_overloaded_is_503_with_retry_after(
    pool: FakeModelPool, server: LiveServer, stream: bool
) -> None:
    pool.error = Overloaded("queue full", retry_after_s=7)
    r = _post(server, {**OK, "stream": stream})
    err = _assert_openai_error(r, 503)
    assert r.headers["retry-after"] == "7"
    assert err["code"] == "overloaded"


def test_context_too_long_is_400(pool: FakeModelPool, server: LiveServer) -> None:
    pool.error = ContextTooLong("prompt has 9000 tokens; the model's context is 8192")
    err = _assert_openai_error(_post(server, OK), 400)
    assert err["code"] == "context_length_exceeded"
    assert "9000" in err["message"] and "8192" in err["message"]


def test_engine_failure_is_500(pool: FakeModelPool, server: LiveServer) -> None:
    pool.error = RuntimeError("boom")
    err = _assert_openai_error(_post(server, OK), 500)
    assert err["type"] == "server_error"


def test_failure_after_stream_started_is_an_in_stream_error(
    pool: FakeModelPool, client: openai.OpenAI
) -> None:
    steps = text_script(["partial"])[:-1]  # drop Done
    pool.script_for = lambda req: [*steps, Failed(RequestId(""), RuntimeError("engine died"))]
    stream = client.chat.completions.create(
        model="fake-model", messages=[{"role": "user", "content": "hi"}], stream=True
    )
    seen = []
    with pytest.raises(openai.APIError) as e:
        for chunk in stream:
            seen.extend(c.delta.content or "" for c in chunk.choices)
    assert "".join(seen) == "partial"
    assert "engine died" in str(e.value)


KEY = "sk-test-secret-123"


@pytest.fixture
def keyed_server(pool: FakeModelPool):
    with running_server(pool, Settings(server=ServerSettings(api_key=KEY))) as live:
        yield live


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {KEY}"}],
)
def test_api_key_required_and_never_echoed(keyed_server: LiveServer, headers: dict) -> None:
    for path in ("/v1/models", "/api/stats"):
        r = httpx.get(f"{keyed_server.base_url}{path}", headers=headers)
        _assert_openai_error(r, 401)
        assert KEY not in r.text
        assert "wrong" not in r.text


def test_api_key_accepted_and_health_stays_open(keyed_server: LiveServer) -> None:
    assert httpx.get(f"{keyed_server.base_url}/health").status_code == 200
    ok = openai.OpenAI(base_url=keyed_server.openai_base_url, api_key=KEY, max_retries=0)
    assert ok.chat.completions.create(**OK).choices[0].message.content == "Hello world"
    r = httpx.get(f"{keyed_server.base_url}/api/stats", headers={"x-api-key": KEY})
    assert r.status_code == 200
    bad = openai.OpenAI(base_url=keyed_server.openai_base_url, api_key="nope", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.chat.completions.create(**OK)


def test_body_over_limit_is_413_in_openai_shape(pool: FakeModelPool) -> None:
    settings = Settings(server=ServerSettings(max_request_bytes=1000))
    with running_server(pool, settings) as live:
        big = {**OK, "messages": [{"role": "user", "content": "x" * 5000}]}
        _assert_openai_error(_post(live, big), 413)


def test_failure_while_rendering_becomes_an_in_stream_error(
    pool: FakeModelPool, server: LiveServer
) -> None:
    from omlx.engine.api import Started, Token

    bad: list = ["not a TokenLogprob"]
    broken = Token(RequestId(""), text="x", token_ids=[1], logprobs=bad)
    pool.script_for = lambda req: [Started(RequestId(""), 3), broken]
    body = {**OK, "stream": True, "logprobs": True}
    with httpx.stream("POST", f"{server.base_url}/v1/chat/completions", json=body) as r:
        data = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
    assert r.status_code == 200
    assert '"error"' in data[-1] and "internal error" in data[-1]
