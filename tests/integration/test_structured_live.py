"""Structured outputs and forced tool calls through the official openai and anthropic clients.

A tiny random llama on a live server checks the wire shapes (its output is structured only
because the grammar makes it so); the real default model, SmolLM2, answers 50 sampled
requests per case, streamed and not.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import jsonschema
import openai
import pytest

from omlx.cache.prefix_cache import PrefixCache
from omlx.pool.pool import LocalModelPool
from omlx.server.app import create_app
from omlx.settings import CacheSettings, EngineSettings, Settings
from tests.fixtures.live_server import LiveServer, running_server

pytestmark = pytest.mark.timeout(300)

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "role": {"enum": ["admin", "user", "guest"]},
        "address": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 12},
                "zip": {"type": "integer", "minimum": 1000, "maximum": 9999},
            },
            "required": ["city", "zip"],
            "additionalProperties": False,
        },
        "scores": {
            "type": "array",
            # multipleOf bounds the decimals: sampled at temperature 1, a model can otherwise
            # write digits until max_tokens (seen: 3.1111111...).
            "items": {"type": "number", "minimum": 0, "maximum": 10, "multipleOf": 0.5},
            "minItems": 1,
            "maxItems": 3,
        },
    },
    "required": ["name", "age", "role", "address", "scores"],
    "additionalProperties": False,
}
# For the random model: integer scores (a random model's decimals never end).
TINY_PERSON = {
    **PERSON,
    "properties": {
        **PERSON["properties"],
        "scores": {
            **PERSON["properties"]["scores"],
            "items": {"type": "integer", "minimum": 0, "maximum": 9},
        },
    },
}
WEATHER_PARAMS = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 16},
        "unit": {"enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
    },
    "required": ["city", "unit", "days"],
    "additionalProperties": False,
}
TIME_PARAMS = {
    "type": "object",
    "properties": {"zone": {"enum": ["utc", "cet", "pst"]}},
    "required": ["zone"],
    "additionalProperties": False,
}
OPENAI_TOOLS = [
    {
        "type": "function",
        "function": {"name": "get_weather", "description": "Weather", "parameters": WEATHER_PARAMS},
    },
    {
        "type": "function",
        "function": {"name": "get_time", "description": "Clock", "parameters": TIME_PARAMS},
    },
]
ANTHROPIC_TOOLS = [
    {"name": "get_weather", "description": "Weather", "input_schema": WEATHER_PARAMS},
    {"name": "get_time", "description": "Clock", "input_schema": TIME_PARAMS},
]
PARAMS = {"get_weather": WEATHER_PARAMS, "get_time": TIME_PARAMS}
JSON_SCHEMA_FORMAT = {
    "type": "json_schema",
    "json_schema": {"name": "person", "schema": PERSON, "strict": True},
}
TINY_FORMAT = {
    "type": "json_schema",
    "json_schema": {"name": "person", "schema": TINY_PERSON, "strict": True},
}


def _serve(model_dir: Path, name: str, max_running: int = 32, cache: PrefixCache | None = None):
    settings = Settings(engine=EngineSettings(default_model=name, max_running=max_running))
    factory = cache.factory() if cache is not None else None
    pool = LocalModelPool(settings, models={name: model_dir}, prefix_factory=factory)
    return running_server(create_app(pool, settings, close_pool_on_shutdown=True), settings)


@pytest.fixture(scope="module")
def live(tiny_llama_dir: Path) -> Iterator[LiveServer]:
    with _serve(tiny_llama_dir, "tiny") as server:
        yield server


@pytest.fixture
def oai(live: LiveServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=live.openai_base_url, api_key="x", max_retries=0, timeout=120)


@pytest.fixture
def claude(live: LiveServer) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=live.base_url, api_key="x", max_retries=0, timeout=120)


def _user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


# -- wire shapes on the tiny model --------------------------------------------------------


def test_chat_json_schema_streamed_and_not(oai: openai.OpenAI) -> None:
    kw: dict[str, Any] = {
        "model": "tiny",
        "messages": _user("A person"),
        "max_tokens": 200,
        "temperature": 0,
        "response_format": TINY_FORMAT,
    }
    r = oai.chat.completions.create(**kw)
    assert r.choices[0].finish_reason == "stop"
    jsonschema.validate(json.loads(r.choices[0].message.content), TINY_PERSON)
    chunks = list(oai.chat.completions.create(**kw, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == (
        r.choices[0].message.content
    )


def test_completions_and_responses_take_a_format(oai: openai.OpenAI) -> None:
    c = oai.completions.create(
        model="tiny",
        prompt="A person:",
        max_tokens=200,
        temperature=0,
        extra_body={"response_format": TINY_FORMAT},
    )
    jsonschema.validate(json.loads(c.choices[0].text), TINY_PERSON)
    r = oai.responses.create(
        model="tiny",
        input="A person",
        max_output_tokens=200,
        temperature=0,
        text={
            "format": {
                "type": "json_schema",
                "name": "person",
                "schema": TINY_PERSON,
                "strict": True,
            }
        },
    )
    jsonschema.validate(json.loads(r.output_text), TINY_PERSON)
    assert r.text.format.type == "json_schema"
    obj = oai.responses.create(
        model="tiny", input="JSON", max_output_tokens=400, text={"format": {"type": "json_object"}}
    )
    if obj.status == "completed":
        assert isinstance(json.loads(obj.output_text), dict)


@pytest.mark.parametrize("stream", [False, True])
def test_openai_forced_calls_streamed_and_not(oai: openai.OpenAI, stream: bool) -> None:
    named = {"type": "function", "function": {"name": "get_time"}}
    for choice, names in (("required", set(PARAMS)), (named, {"get_time"})):
        kw: dict[str, Any] = {
            "model": "tiny",
            "messages": _user("What time is it?"),
            "max_tokens": 120,
            "tools": OPENAI_TOOLS,
            "tool_choice": choice,
            "parallel_tool_calls": False,
        }
        calls, finish = _openai_calls(oai, kw, stream)
        assert finish == "tool_calls"
        [(name, arguments)] = calls
        assert name in names
        jsonschema.validate(arguments, PARAMS[name])


def _openai_calls(
    oai: openai.OpenAI, kw: dict[str, Any], stream: bool
) -> tuple[list[tuple[str, Any]], str]:
    if not stream:
        r = oai.chat.completions.create(**kw)
        calls = r.choices[0].message.tool_calls or []
        return [(c.function.name, json.loads(c.function.arguments)) for c in calls], (
            r.choices[0].finish_reason
        )
    parts: dict[int, list[str]] = {}
    finish = ""
    for chunk in oai.chat.completions.create(**kw, stream=True):
        if not chunk.choices:
            continue
        choice = chunk.choices[0]
        finish = choice.finish_reason or finish
        for d in choice.delta.tool_calls or []:
            entry = parts.setdefault(d.index, ["", ""])
            entry[0] += (d.function.name or "") if d.function else ""
            entry[1] += (d.function.arguments or "") if d.function else ""
    return [(n, json.loads(a)) for n, a in parts.values()], finish


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_tool_choice_any_and_tool(claude: anthropic.Anthropic, stream: bool) -> None:
    for choice, names in (
        ({"type": "any", "disable_parallel_tool_use": True}, set(PARAMS)),
        ({"type": "tool", "name": "get_weather"}, {"get_weather"}),
    ):
        kw: dict[str, Any] = {
            "model": "tiny",
            "max_tokens": 160,
            "messages": _user("Weather in Oslo?"),
            "tools": ANTHROPIC_TOOLS,
            "tool_choice": choice,
        }
        message = _anthropic_message(claude, kw, stream)
        assert message.stop_reason == "tool_use"
        uses = [b for b in message.content if b.type == "tool_use"]
        assert uses and all(u.name in names for u in uses)
        for u in uses:
            jsonschema.validate(u.input, PARAMS[u.name])


def _anthropic_message(claude: anthropic.Anthropic, kw: dict[str, Any], stream: bool) -> Any:
    if not stream:
        return claude.messages.create(**kw)
    with claude.messages.stream(**kw) as s:
        return s.get_final_message()


def test_unenforceable_schemas_are_400s_in_each_dialect(
    live: LiveServer, oai: openai.OpenAI, claude: anthropic.Anthropic
) -> None:
    bad = {
        "type": "json_schema",
        "json_schema": {"name": "x", "schema": {"type": "array", "uniqueItems": True}},
    }
    with pytest.raises(openai.BadRequestError) as e:
        oai.chat.completions.create(model="tiny", messages=_user("x"), response_format=bad)
    assert "uniqueItems" in e.value.message and e.value.body["param"] == "response_format"
    bad_tool = [
        {"name": "f", "input_schema": {"type": "object", "properties": {"a": {"type": "nope"}}}}
    ]
    with pytest.raises(anthropic.BadRequestError) as e2:
        claude.messages.create(
            model="tiny",
            max_tokens=8,
            messages=_user("x"),
            tools=bad_tool,
            tool_choice={"type": "any"},
        )
    assert "cannot be enforced" in str(e2.value)
    r = httpx.post(
        f"{live.openai_base_url}/chat/completions",
        json={"model": "tiny", "messages": _user("x"), "response_format": {"type": "json_schema"}},
    )
    assert r.status_code == 400 and r.json()["error"]["param"] == "response_format"


def test_max_tokens_inside_the_structure_is_length(oai: openai.OpenAI) -> None:
    r = oai.chat.completions.create(
        model="tiny",
        messages=_user("weather"),
        max_tokens=5,
        tools=OPENAI_TOOLS,
        tool_choice="required",
    )
    assert r.choices[0].finish_reason == "length"
    assert not r.choices[0].message.tool_calls


# -- the real default model, sampled ------------------------------------------------------
# max_tokens leaves room for the longest conforming answer: a 16-character string can take
# 6 tokens a character when the model writes \u escapes.

NUM_SAMPLED = 50


@pytest.fixture(scope="module")
def smollm2(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveServer]:
    """SmolLM2 with the prefix cache, as served: each case's prompt (the tools written into
    it run to ~300 tokens) is prefilled once by a warm-up request, not 50 times."""
    smollm2_dir = request.getfixturevalue("smollm2_dir")
    cache = PrefixCache(CacheSettings(), cold_dir=tmp_path_factory.mktemp("cold"))
    try:
        with _serve(smollm2_dir, "smollm2", max_running=NUM_SAMPLED, cache=cache) as server:
            yield server
    finally:
        cache.close()


def _warm_then_sample(one: Any, warm: tuple[int, ...] = (1,), n: int = NUM_SAMPLED) -> list[Any]:
    """One request per distinct prompt first (`warm`: their prompts enter the prefix
    cache), then `n` at once; one event loop for all, as the async clients bind to
    theirs."""

    async def main() -> list[Any]:
        for i in warm:
            await one(i)
        return await asyncio.gather(*(one(i) for i in range(n)))

    return asyncio.run(main())


@pytest.mark.realmodel
@pytest.mark.slow
def test_smollm2_sampled_answers_conform_to_a_nested_schema(smollm2: LiveServer) -> None:
    client = openai.AsyncOpenAI(
        base_url=smollm2.openai_base_url, api_key="x", max_retries=0, timeout=600
    )
    kw: dict[str, Any] = {
        "model": "smollm2",
        "messages": _user("Invent a user of our web shop and describe them as JSON."),
        "max_tokens": 240,
        "temperature": 1.0,
        "response_format": JSON_SCHEMA_FORMAT,
    }

    async def one(i: int) -> tuple[str, str]:
        if i % 2:
            r = await client.chat.completions.create(**kw)
            return r.choices[0].message.content or "", r.choices[0].finish_reason
        text, finish = "", ""
        async for chunk in await client.chat.completions.create(**kw, stream=True):
            if chunk.choices:
                text += chunk.choices[0].delta.content or ""
                finish = chunk.choices[0].finish_reason or finish
        return text, finish

    results = _warm_then_sample(one)
    for text, finish in results:
        assert finish == "stop", text
        jsonschema.validate(json.loads(text), PERSON)
    assert len({text for text, _ in results}) > NUM_SAMPLED // 2


QUESTION = _user("What's the weather in Paris for the next 3 days?")
# Requests i % 4 < 2 may call any tool, the others one named tool, whose prompt lists
# only that tool (260 tokens against 331): one warm-up request for each.
FORCED_PROMPTS = (1, 3)
# The Anthropic dialect's own mapping (tool_choice any / tool, disable_parallel_tool_use,
# stop_reason) over the same grammar the OpenAI test samples 50 times: half as many
# requests, as half its rows may go on calling tools to max_tokens (64 of the suite's
# seconds on 2 cores at 50).
ANTHROPIC_SAMPLED = 24


@pytest.mark.realmodel
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_smollm2_forced_calls_through_the_openai_client(smollm2: LiveServer) -> None:
    oai = openai.AsyncOpenAI(
        base_url=smollm2.openai_base_url, api_key="x", max_retries=0, timeout=600
    )

    async def openai_call(i: int) -> tuple[list[tuple[str, Any]], str]:
        kw = {
            "model": "smollm2",
            "messages": QUESTION,
            "max_tokens": 200,
            "temperature": 1.0,
            "tools": OPENAI_TOOLS,
            "tool_choice": "required"
            if i % 4 < 2
            else {"type": "function", "function": {"name": "get_weather"}},
            "parallel_tool_calls": False,
        }
        if i % 2:
            r = await oai.chat.completions.create(**kw)
            calls = r.choices[0].message.tool_calls or []
            finish = r.choices[0].finish_reason
            return [(c.function.name, json.loads(c.function.arguments)) for c in calls], finish
        parts: dict[int, list[str]] = {}
        finish = ""
        async for chunk in await oai.chat.completions.create(**kw, stream=True):
            if chunk.choices:
                finish = chunk.choices[0].finish_reason or finish
                for d in chunk.choices[0].delta.tool_calls or []:
                    entry = parts.setdefault(d.index, ["", ""])
                    entry[0] += d.function.name or ""
                    entry[1] += d.function.arguments or ""
        return [(n, json.loads(a)) for n, a in parts.values()], finish

    for i, (calls, finish) in enumerate(_warm_then_sample(openai_call, warm=FORCED_PROMPTS)):
        assert finish == "tool_calls"  # parallel_tool_calls=False: exactly one call
        [(name, arguments)] = calls
        assert name == "get_weather" or i % 4 < 2
        jsonschema.validate(arguments, PARAMS[name])


@pytest.mark.realmodel
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_smollm2_forced_calls_through_the_anthropic_client(smollm2: LiveServer) -> None:
    claude = anthropic.AsyncAnthropic(
        base_url=smollm2.base_url, api_key="x", max_retries=0, timeout=600
    )

    async def anthropic_call(i: int) -> Any:
        kw = {
            "model": "smollm2",
            "messages": QUESTION,
            "max_tokens": 200,
            "extra_body": {"temperature": 1.0},  # this client takes it only as extra body
            "tools": ANTHROPIC_TOOLS,
            "tool_choice": {"type": "any", "disable_parallel_tool_use": True}
            if i % 4 < 2
            else {"type": "tool", "name": "get_weather"},
        }
        if i % 2:
            return await claude.messages.create(**kw)
        async with claude.messages.stream(**kw) as s:
            return await s.get_final_message()

    sampled = _warm_then_sample(anthropic_call, warm=FORCED_PROMPTS, n=ANTHROPIC_SAMPLED)
    for i, m in enumerate(sampled):
        calls = [(b.name, b.input) for b in m.content if b.type == "tool_use"]
        assert calls, (i, m.stop_reason, m.content)
        for name, arguments in calls:
            assert name == "get_weather" or i % 4 < 2
            jsonschema.validate(arguments, PARAMS[name])
        if i % 4 < 2:  # disable_parallel_tool_use: exactly one call, then the turn ends
            assert m.stop_reason == "tool_use" and len(calls) == 1, (i, m.content)
        elif m.stop_reason != "tool_use":  # parallel calls allowed: it may go on calling
            text = "".join(b.text for b in m.content if b.type == "text")
            assert m.stop_reason == "max_tokens" and text.startswith("<tool_call>"), (i, m.content)


@pytest.mark.realmodel
def test_smollm2_count_tokens_counts_tools_its_template_drops(
    request: pytest.FixtureRequest,
) -> None:
    with _serve(request.getfixturevalue("smollm2_dir"), "smollm2") as server:
        claude = anthropic.Anthropic(base_url=server.base_url, api_key="x", max_retries=0)
        plain = claude.messages.count_tokens(model="smollm2", messages=_user("Weather?"))
        with_tools = claude.messages.count_tokens(
            model="smollm2", messages=_user("Weather?"), tools=ANTHROPIC_TOOLS
        )
    assert with_tools.input_tokens > plain.input_tokens + 100
