"""Chat completions through the official openai client: shapes, usage, streaming."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from omlx.engine.api import FinishReason, ToolCall
from tests.fixtures.fake_pool import FakeModelPool, text_script
from tests.fixtures.live_server import LiveServer

MESSAGES = [{"role": "user", "content": "hi"}]


def test_chat_non_streamed_with_usage_and_cached_tokens(
    pool: FakeModelPool, client: openai.OpenAI
) -> None:
    pool.script_for = lambda req: text_script(["Hel", "lo"], prompt_tokens=11, cached_tokens=8)
    r = client.chat.completions.create(model="fake-model", messages=MESSAGES)
    assert r.object == "chat.completion"
    assert r.id.startswith("chatcmpl-")
    assert r.model == "fake-model"
    assert r.choices[0].message.role == "assistant"
    assert r.choices[0].message.content == "Hello"
    assert r.choices[0].finish_reason == "stop"
    assert r.usage is not None
    assert (r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.total_tokens) == (11, 2, 13)
    assert r.usage.prompt_tokens_details.cached_tokens == 8


def test_chat_response_has_nulls_openai_requires(server: LiveServer) -> None:
    body = httpx.post(
        f"{server.base_url}/v1/chat/completions",
        json={"model": "fake-model", "messages": MESSAGES},
    ).json()
    choice = body["choices"][0]
    assert choice["logprobs"] is None
    assert choice["message"]["refusal"] is None
    assert "tool_calls" not in choice["message"]
    assert body["system_fingerprint"] is None


def test_chat_streamed_chunks_and_final_usage(pool: FakeModelPool, client: openai.OpenAI) -> None:
    pool.script_for = lambda req: text_script(["a", "b", "c"], prompt_tokens=5, cached_tokens=4)
    chunks = list(
        client.chat.completions.create(
            model="fake-model",
            messages=MESSAGES,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "abc"
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == "stop" and all(f is None for f in finishes[:-1])
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == 3
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens == 4
    assert all(c.usage is None for c in chunks[:-1])
    assert len({c.id for c in chunks}) == 1


def test_chat_stream_without_usage_option_has_no_usage_field(server: LiveServer) -> None:
    with httpx.stream(
        "POST",
        f"{server.base_url}/v1/chat/completions",
        json={"model": "fake-model", "messages": MESSAGES, "stream": True},
    ) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        data = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
    assert data[-1] == "[DONE]"
    assert all("usage" not in json.loads(d) for d in data[:-1])


def test_length_finish_reason(pool: FakeModelPool, client: openai.OpenAI) -> None:
    pool.script_for = lambda req: text_script(["x"], finish=FinishReason.LENGTH)
    r = client.chat.completions.create(model="fake-model", messages=MESSAGES, max_tokens=1)
    assert r.choices[0].finish_reason == "length"


CALL = ToolCall(id="call_1", name="get_weather", arguments='{"city": "Paris"}')


def test_tool_calls_and_reasoning_non_streamed(pool: FakeModelPool, server: LiveServer) -> None:
    pool.script_for = lambda req: text_script(
        [], reasoning=["Let me ", "think."], tool_calls=[CALL]
    )
    body = httpx.post(
        f"{server.base_url}/v1/chat/completions",
        json={"model": "fake-model", "messages": MESSAGES},
    ).json()
    choice = body["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    message = choice["message"]
    assert message["content"] is None
    assert message["reasoning_content"] == "Let me think."
    assert message["tool_calls"] == [
        {
            "id": "call_1",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
        }
    ]


def test_tool_calls_streamed_in_openai_delta_shape(
    pool: FakeModelPool, client: openai.OpenAI
) -> None:
    second = ToolCall(id="call_2", name="get_time", arguments="{}")
    pool.script_for = lambda req: text_script(
        ["Sure."], reasoning=["hmm"], tool_calls=[CALL, second]
    )
    chunks = list(
        client.chat.completions.create(model="fake-model", messages=MESSAGES, stream=True)
    )
    deltas = [c.choices[0].delta for c in chunks]
    reasoning = "".join(getattr(d, "reasoning_content", None) or "" for d in deltas)
    assert reasoning == "hmm"
    assert "".join(d.content or "" for d in deltas) == "Sure."
    calls = [tc for d in deltas for tc in (d.tool_calls or [])]
    assert [(tc.index, tc.id, tc.type) for tc in calls] == [
        (0, "call_1", "function"),
        (1, "call_2", "function"),
    ]
    assert calls[0].function.name == "get_weather"
    assert json.loads(calls[0].function.arguments) == {"city": "Paris"}
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_request_fields_reach_the_engine(pool: FakeModelPool, client: openai.OpenAI) -> None:
    client.chat.completions.create(
        model="fake-model",
        messages=[
            {"role": "developer", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "f", "arguments": "{}"},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "42"},
        ],
        temperature=0.0,
        top_p=0.9,
        seed=3,
        stop="END",
        max_completion_tokens=17,
        logit_bias={"5": -100},
        tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}],
        tool_choice="auto",
        extra_body={"top_k": 20, "min_p": 0.05, "chat_template_kwargs": {"enable_thinking": False}},
    )
    req = pool.requests[-1]
    assert [m.role for m in req.messages or []] == ["developer", "user", "assistant", "tool"]
    assert req.messages[1].content == [{"type": "text", "text": "hi"}]
    assert req.messages[2].tool_calls[0]["function"]["name"] == "f"
    assert req.messages[3].tool_call_id == "c1"
    assert req.max_tokens == 17
    assert req.stop == ["END"]
    s = req.sampling
    assert (s.temperature, s.top_p, s.top_k, s.min_p, s.seed) == (0.0, 0.9, 20, 0.05, 3)
    assert s.logit_bias == {5: -100.0}
    assert req.tools[0]["function"]["name"] == "f"
    assert req.tool_choice == "auto"
    assert req.chat_template_kwargs == {"enable_thinking": False}


def test_unset_sampling_fields_are_left_to_the_model(
    pool: FakeModelPool, client: openai.OpenAI
) -> None:
    """The server does not fill in 1.0: the engine takes the model's generation_config."""
    client.chat.completions.create(model="fake-model", messages=MESSAGES)
    s = pool.requests[-1].sampling
    assert (s.temperature, s.top_p, s.top_k, s.min_p, s.repetition_penalty) == (None,) * 5
    client.chat.completions.create(
        model="fake-model", messages=MESSAGES, temperature=1.0, extra_body={"top_k": -1}
    )
    s = pool.requests[-1].sampling
    assert (s.temperature, s.top_p, s.top_k) == (1.0, None, 0)  # -1: vLLM's "off"


def test_logprobs_non_streamed(pool: FakeModelPool, client: openai.OpenAI) -> None:
    pool.script_for = lambda req: text_script(["a", "b"], logprobs=True)
    r = client.chat.completions.create(
        model="fake-model", messages=MESSAGES, logprobs=True, top_logprobs=2
    )
    content = r.choices[0].logprobs.content
    assert [e.token for e in content] == ["a", "b"]
    assert content[0].logprob == -0.5
    assert [t.token for t in content[0].top_logprobs] == ["a", "x"]
    assert pool.requests[-1].sampling.top_logprobs == 2


@pytest.mark.parametrize(
    ("messages", "param"),
    [([{"role": "user", "content": None}], "messages[0].content"),
     ([{"role": "user"}], "messages[0].content"),
     ([{"role": "user", "content": []}], "messages[0].content"),
     ([{"role": "system", "content": "s"}, {"role": "user", "content": None}],
      "messages[1].content"),
     ([{"role": "assistant", "content": None}], "messages[0].content"),
     ([{"role": "user", "content": "q"}, {"role": "tool", "content": "42"}],
      "messages[1].tool_call_id")],
)  # fmt: skip
def test_messages_without_content_or_call_id_are_400(
    pool: FakeModelPool, server: LiveServer, messages: list, param: str
) -> None:
    r = httpx.post(
        f"{server.base_url}/v1/chat/completions", json={"model": "fake-model", "messages": messages}
    )
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param
    assert pool.requests == []
