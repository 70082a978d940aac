"""POST /v1/messages through the official anthropic client: text, tools, thinking, usage."""

from __future__ import annotations

import json

import anthropic
import pytest

from omlx.engine.api import Done, FinishReason, Started, Token, ToolCall
from omlx.settings import AgentSettings, EngineSettings, Settings
from tests.fixtures.fake_pool import NO_ID, FakeModelPool, text_script

USER = [{"role": "user", "content": "hi"}]
WEATHER_TOOL = {
    "name": "get_weather",
    "description": "Weather for a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def test_text_message_with_usage(pool: FakeModelPool, client: anthropic.Anthropic) -> None:
    pool.script_for = lambda req: text_script(["Hel", "lo"], prompt_tokens=11, cached_tokens=8)
    message = client.messages.create(model="fake-model", max_tokens=64, messages=USER)
    assert message.type == "message" and message.role == "assistant"
    assert message.id.startswith("msg_")
    assert message.model == "fake-model"
    assert [(b.type, b.text) for b in message.content] == [("text", "Hello")]
    assert message.stop_reason == "end_turn"
    assert message.stop_sequence is None
    # Anthropic's input_tokens excludes cache reads; together they are the prompt.
    assert (message.usage.input_tokens, message.usage.cache_read_input_tokens) == (3, 8)
    assert message.usage.output_tokens == 2
    request = pool.requests[-1]
    assert request.max_tokens == 64
    assert [(m.role, m.content) for m in request.messages] == [("user", "hi")]


def test_system_blocks_sampling_and_stop_sequences(
    pool: FakeModelPool, client: anthropic.Anthropic
) -> None:
    def script(req):
        return [
            Started(NO_ID, 5),
            Token(NO_ID, "ok", [1]),
            Done(NO_ID, FinishReason.STOP, 5, 1, stop_sequence="END"),
        ]

    pool.script_for = script
    message = client.messages.create(
        model="fake-model",
        max_tokens=10,
        system=[{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Be kind."}],
        messages=USER,
        stop_sequences=["END", "STOP"],
        # This SDK no longer has sampling arguments; older clients still send them.
        extra_body={"temperature": 0.0, "top_k": 5},
    )
    assert (message.stop_reason, message.stop_sequence) == ("stop_sequence", "END")
    request = pool.requests[-1]
    assert request.messages[0].role == "system"
    assert request.messages[0].content == "Be brief.\nBe kind."
    assert request.stop == ["END", "STOP"]
    assert request.sampling.is_greedy and request.sampling.top_k == 5


def test_unset_sampling_fields_are_left_to_the_model(
    pool: FakeModelPool, client: anthropic.Anthropic
) -> None:
    client.messages.create(model="fake-model", max_tokens=10, messages=USER)
    s = pool.requests[-1].sampling
    assert (s.temperature, s.top_p, s.top_k) == (None, None, None)


def test_max_tokens_stop_reason(pool: FakeModelPool, client: anthropic.Anthropic) -> None:
    pool.script_for = lambda req: text_script(["a"], finish=FinishReason.LENGTH)
    message = client.messages.create(model="fake-model", max_tokens=1, messages=USER)
    assert message.stop_reason == "max_tokens"


def test_tool_use_round_trip(pool: FakeModelPool, client: anthropic.Anthropic) -> None:
    call = ToolCall(id="call_abc123", name="get_weather", arguments='{"city": "Paris"}')
    pool.script_for = lambda req: text_script(["Checking."], tool_calls=[call])
    first = client.messages.create(
        model="fake-model",
        max_tokens=64,
        messages=[{"role": "user", "content": "Weather in Paris?"}],
        tools=[WEATHER_TOOL],
        tool_choice={"type": "any"},
    )
    assert first.stop_reason == "tool_use"
    text, tool_use = first.content
    assert text.type == "text" and text.text == "Checking."
    assert (tool_use.type, tool_use.name, tool_use.input) == (
        "tool_use",
        "get_weather",
        {"city": "Paris"},
    )
    assert tool_use.id == "toolu_abc123"
    sent = pool.requests[-1]
    assert sent.tools == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Weather for a city",
                "parameters": WEATHER_TOOL["input_schema"],
            },
        }
    ]
    assert sent.tool_choice == "required"

    pool.script_for = lambda req: text_script(["Sunny."])
    second = client.messages.create(
        model="fake-model",
        max_tokens=64,
        tools=[WEATHER_TOOL],
        messages=[
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": first.content},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": tool_use.id, "content": "22C, sun"},
                    {"type": "text", "text": "Thanks"},
                ],
            },
        ],
    )
    assert second.content[0].text == "Sunny."
    user, assistant, tool, follow_up = pool.requests[-1].messages
    assert (user.role, assistant.role, tool.role, follow_up.role) == (
        "user",
        "assistant",
        "tool",
        "user",
    )
    assert assistant.content == "Checking."
    assert assistant.tool_calls == [
        {
            "id": "toolu_abc123",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
        }
    ]
    assert (tool.tool_call_id, tool.content) == ("toolu_abc123", "22C, sun")
    assert follow_up.content == "Thanks"


@pytest.mark.parametrize(
    ("thinking", "kwargs", "budget"),
    [
        ({"type": "enabled", "budget_tokens": 1024}, {"enable_thinking": True}, 1024),
        ({"type": "disabled"}, {"enable_thinking": False}, None),
        ({"type": "adaptive"}, {}, None),
        (None, {"enable_thinking": False}, None),
    ],
)
def test_thinking_modes(
    pool: FakeModelPool, client: anthropic.Anthropic, thinking, kwargs, budget
) -> None:
    pool.script_for = lambda req: text_script(["42"], reasoning=["Let me ", "think."])
    extra = {"thinking": thinking} if thinking else {}
    message = client.messages.create(model="fake-model", max_tokens=2048, messages=USER, **extra)
    request = pool.requests[-1]
    assert request.chat_template_kwargs == kwargs
    assert request.thinking_budget_tokens == budget
    block, text = message.content
    assert block.type == "thinking" and block.thinking == "Let me think."
    assert block.signature
    assert text.text == "42"


def test_thinking_block_sent_back_becomes_reasoning(
    pool: FakeModelPool, client: anthropic.Anthropic
) -> None:
    client.messages.create(
        model="fake-model",
        max_tokens=64,
        messages=[
            {"role": "user", "content": "q"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "hmm", "signature": "sig"},
                    {"type": "text", "text": "a"},
                ],
            },
            {"role": "user", "content": "q2"},
        ],
    )
    assistant = pool.requests[-1].messages[1]
    assert (assistant.content, assistant.reasoning_content) == ("a", "hmm")


def test_base64_image_becomes_an_image_part(
    pool: FakeModelPool, client: anthropic.Anthropic
) -> None:
    client.messages.create(
        model="fake-model",
        max_tokens=8,
        messages=[
            {
                "role": "user",
                "content": [
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": "iVBO"},
                    },
                    {"type": "text", "text": "What is this?"},
                ],
            }
        ],
    )
    assert pool.requests[-1].messages[0].content == [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO"}},
        {"type": "text", "text": "What is this?"},
    ]


def test_count_tokens_equals_reported_input(
    pool: FakeModelPool, client: anthropic.Anthropic
) -> None:
    pool.script_for = lambda req: text_script(["x"], prompt_tokens=7)
    counted = client.messages.count_tokens(model="fake-model", messages=USER, tools=[WEATHER_TOOL])
    message = client.messages.create(model="fake-model", max_tokens=8, messages=USER)
    assert counted.input_tokens == message.usage.input_tokens == 7


class _ContextPool(FakeModelPool):
    def list_models(self):
        import dataclasses

        return [dataclasses.replace(m, context_length=1000) for m in super().list_models()]


@pytest.fixture
def scaled_settings() -> Settings:
    return Settings(
        agents=AgentSettings(
            model_aliases={"sonnet": "other-model"}, context_window_tokens=200_000
        ),
        engine=EngineSettings(default_model="fake-model"),
    )


def test_aliases_and_context_scaling(scaled_settings: Settings) -> None:
    from tests.fixtures.live_server import running_server

    pool = _ContextPool(models=("fake-model", "other-model"))
    pool.script_for = lambda req: text_script(["x"], prompt_tokens=10, cached_tokens=4)
    with running_server(pool, scaled_settings) as live:
        client = anthropic.Anthropic(base_url=live.base_url, api_key="k", max_retries=0)
        message = client.messages.create(
            model="claude-sonnet-4-5-20250929", max_tokens=8, messages=USER
        )
        assert pool.requests[-1].model == "other-model"
        assert message.model == "claude-sonnet-4-5-20250929"
        # 200k reported window over a 1000-token model: every count x200.
        assert (message.usage.input_tokens, message.usage.cache_read_input_tokens) == (
            1200,
            800,
        )
        assert message.usage.output_tokens == 200
        counted = client.messages.count_tokens(model="claude-opus-4-1", messages=USER)
        assert counted.input_tokens == 7 * 200
        client.messages.create(model="claude-opus-4-1", max_tokens=8, messages=USER)
        assert pool.requests[-1].model == "fake-model"  # no opus alias: the default model


def test_claude_names_get_404_without_the_fallback() -> None:
    from tests.fixtures.live_server import running_server

    settings = Settings(
        agents=AgentSettings(claude_fallback=False),
        engine=EngineSettings(default_model="fake-model"),
    )
    with running_server(FakeModelPool(models=("fake-model",)), settings) as live:
        client = anthropic.Anthropic(base_url=live.base_url, api_key="k", max_retries=0)
        with pytest.raises(anthropic.NotFoundError) as caught:
            client.messages.create(model="claude-opus-4-1", max_tokens=8, messages=USER)
        assert caught.value.body["error"]["type"] == "not_found_error"
        assert "claude-opus-4-1" in caught.value.body["error"]["message"]


def test_tool_input_is_json_text_in_request(pool: FakeModelPool, client) -> None:
    client.messages.create(
        model="fake-model",
        max_tokens=8,
        messages=[
            {"role": "user", "content": "q"},
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"a": [1]}}
                ],
            },
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1"}]},
        ],
    )
    assistant, tool = pool.requests[-1].messages[1:]
    assert json.loads(assistant.tool_calls[0]["function"]["arguments"]) == {"a": [1]}
    assert (tool.role, tool.content) == ("tool", "")
