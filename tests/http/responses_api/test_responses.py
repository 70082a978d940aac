"""POST /v1/responses through the official openai client: text, tools, stream, history."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from omlx.engine.api import FinishReason, ToolCall
from omlx.settings import ServerSettings, Settings
from tests.fixtures.fake_pool import FakeModelPool, text_script
from tests.fixtures.live_server import LiveServer, running_server

TOOL = {
    "type": "function",
    "name": "shell",
    "description": "Run a command",
    "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}},
}


def test_text_response(pool: FakeModelPool, client: openai.OpenAI) -> None:
    pool.script_for = lambda req: text_script(["Hel", "lo"], prompt_tokens=9, cached_tokens=4)
    response = client.responses.create(
        model="fake-model", input="hi", instructions="Be brief.", max_output_tokens=32
    )
    assert response.object == "response" and response.status == "completed"
    assert response.id.startswith("resp_")
    assert response.output_text == "Hello"
    assert response.output[0].type == "message"
    assert response.usage.input_tokens == 9
    assert response.usage.input_tokens_details.cached_tokens == 4
    assert response.usage.output_tokens == 2
    request = pool.requests[-1]
    assert [(m.role, m.content) for m in request.messages] == [
        ("system", "Be brief."),
        ("user", "hi"),
    ]
    assert request.max_tokens == 32
    # Unset sampling is left to the model (its generation_config); set values pass through.
    assert (request.sampling.temperature, request.sampling.top_p) == (None, None)
    client.responses.create(model="fake-model", input="hi", temperature=0.3)
    assert pool.requests[-1].sampling.temperature == 0.3


def test_incomplete_at_max_output_tokens(pool: FakeModelPool, client: openai.OpenAI) -> None:
    pool.script_for = lambda req: text_script(["a"], finish=FinishReason.LENGTH)
    response = client.responses.create(model="fake-model", input="hi", max_output_tokens=1)
    assert response.status == "incomplete"
    assert response.incomplete_details.reason == "max_output_tokens"


def test_tool_call_round_trip_with_previous_response_id(
    pool: FakeModelPool, client: openai.OpenAI
) -> None:
    call = ToolCall(id="call_77", name="shell", arguments='{"cmd": "ls"}')
    pool.script_for = lambda req: text_script([], reasoning=["plan"], tool_calls=[call])
    first = client.responses.create(model="fake-model", input="list files", tools=[TOOL])
    kinds = [item.type for item in first.output]
    assert kinds == ["reasoning", "function_call"]
    fc = first.output[1]
    assert (fc.name, json.loads(fc.arguments), fc.call_id) == ("shell", {"cmd": "ls"}, "call_77")
    assert pool.requests[-1].tools[0]["function"]["name"] == "shell"

    pool.script_for = lambda req: text_script(["Two files."])
    second = client.responses.create(
        model="fake-model",
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": "call_77", "output": "a b"}],
        tools=[TOOL],
    )
    assert second.output_text == "Two files."
    assert second.previous_response_id == first.id
    user, assistant, tool = pool.requests[-1].messages
    assert (user.role, user.content) == ("user", "list files")
    assert assistant.tool_calls[0]["id"] == "call_77"
    assert assistant.reasoning_content == "plan"
    assert (tool.role, tool.tool_call_id, tool.content) == ("tool", "call_77", "a b")


def test_stateless_items_fold_into_chat_turns(pool: FakeModelPool, client: openai.OpenAI) -> None:
    client.responses.create(
        model="fake-model",
        input=[
            {"role": "developer", "content": "rules"},
            {"role": "user", "content": [{"type": "input_text", "text": "q"}]},
            {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "t"}]},
            {"type": "function_call", "call_id": "c1", "name": "shell", "arguments": "{}"},
            {"type": "function_call", "call_id": "c2", "name": "shell", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "o1"},
            {"type": "function_call_output", "call_id": "c2", "output": "o2"},
            {"role": "assistant", "content": [{"type": "output_text", "text": "done"}]},
        ],
    )
    messages = pool.requests[-1].messages
    assert [m.role for m in messages] == [
        "developer",
        "user",
        "assistant",
        "tool",
        "tool",
        "assistant",
    ]
    assert [c["id"] for c in messages[2].tool_calls] == ["c1", "c2"]
    assert messages[2].reasoning_content == "t"


def test_store_is_bounded_and_unknown_ids_are_404(
    pool: FakeModelPool, client: openai.OpenAI, server: LiveServer
) -> None:
    ids = [client.responses.create(model="fake-model", input=f"q{i}").id for i in range(3)]
    assert httpx.get(f"{server.openai_base_url}/responses/{ids[2]}").json()["id"] == ids[2]
    with pytest.raises(openai.NotFoundError) as info:
        client.responses.create(model="fake-model", input="x", previous_response_id=ids[0])
    assert "not found" in str(info.value) and info.value.body["param"] == "previous_response_id"
    unstored = client.responses.create(model="fake-model", input="x", store=False)
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="fake-model", input="y", previous_response_id=unstored.id)
    assert httpx.get(f"{server.openai_base_url}/responses/{ids[0]}").status_code == 404


def test_stream_event_sequence(pool: FakeModelPool, client: openai.OpenAI) -> None:
    call = ToolCall(id="call_5", name="shell", arguments='{"cmd": "pwd"}')
    pool.script_for = lambda req: text_script(
        ["A", "B"], reasoning=["r"], tool_calls=[call], token_delay_s=0.02
    )
    events = list(client.responses.create(model="fake-model", input="hi", stream=True))
    kinds = [e.type for e in events]
    assert kinds == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",  # reasoning
        "response.reasoning_text.delta",
        "response.reasoning_text.done",
        "response.output_item.done",
        "response.output_item.added",  # message
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",  # function call
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    final = events[-1].response
    assert final.output_text == "AB"
    assert [item.type for item in final.output] == ["reasoning", "message", "function_call"]
    assert final.usage.output_tokens == 4
    # The streamed response is stored too: it can be continued.
    pool.script_for = lambda req: text_script(["ok"])
    follow = client.responses.create(
        model="fake-model", input="more", previous_response_id=final.id
    )
    assert follow.output_text == "ok"
    assert [m.role for m in pool.requests[-1].messages] == ["user", "assistant", "user"]


def test_stream_with_openai_helper(pool: FakeModelPool, client: openai.OpenAI) -> None:
    pool.script_for = lambda req: text_script(["x", "y"])
    with client.responses.stream(model="fake-model", input="hi") as stream:
        text = "".join(e.delta for e in stream if e.type == "response.output_text.delta")
        final = stream.get_final_response()
    assert text == "xy" and final.output_text == "xy"


def test_unknown_model_and_bad_items(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="nope", input="hi")
    with pytest.raises(openai.BadRequestError):
        client.responses.create(model="fake-model", input=[{"type": "mystery"}])
    with pytest.raises(openai.BadRequestError):
        client.responses.create(model="fake-model", input=[{"role": "robot", "content": "x"}])


def test_a_long_prefill_sends_in_progress_events(pool: FakeModelPool) -> None:
    """Codex's idle timer counts events, not SSE comments: keep-alives are real events."""
    settings = Settings(server=ServerSettings(keepalive_interval_s=0.05))
    pool.script_for = lambda req: text_script(["ok"], first_token_delay_s=0.4)
    with running_server(pool, settings) as live:
        client = openai.OpenAI(base_url=live.openai_base_url, api_key="x", max_retries=0)
        events = list(client.responses.create(model="fake-model", input="hi", stream=True))
    kinds = [e.type for e in events]
    first_delta = kinds.index("response.output_item.added")
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[2:first_delta].count("response.in_progress") >= 3  # while it was pending
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[-1].type == "response.completed" and events[-1].response.output_text == "ok"
