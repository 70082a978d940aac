"""Constrained decoding inside the continuous batch, on a tiny random llama (real tokenizer).

A random model writes nonsense, so whatever structure comes out comes from the grammar:
sampled at temperature 1, every answer must still parse and conform. Schemas bound every
string, array and number so that a conforming answer ends within max_tokens.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from omlx.cache.prefix_cache import PrefixCache
from omlx.draft.serving import DFlashPath
from omlx.engine.api import FinishReason, ResponseFormat, SamplingParams, Token
from omlx.errors import InvalidRequest
from omlx.pool.pool import LocalModelPool
from omlx.settings import CacheSettings, EngineSettings, Settings
from tests.mlx.engine.engine_helpers import Result, collect, request, run_with_pool

pytestmark = pytest.mark.timeout(300)

SAMPLED = SamplingParams(temperature=1.0)
NUM_SAMPLED = 50
PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 10},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "role": {"enum": ["admin", "user", "guest"]},
        "address": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 8},
                "zip": {"type": "integer", "minimum": 1000, "maximum": 9999},
            },
            "required": ["city", "zip"],
            "additionalProperties": False,
        },
        "scores": {
            "type": "array",
            "items": {"type": "integer", "minimum": -5, "maximum": 5},
            "minItems": 1,
            "maxItems": 3,
        },
    },
    "required": ["name", "age", "role", "address", "scores"],
    "additionalProperties": False,
}
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 12},
                "unit": {"enum": ["c", "f"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 7},
            },
            "required": ["city", "unit", "days"],
            "additionalProperties": False,
        },
    },
}
CLOCK = {
    "type": "function",
    "function": {
        "name": "get_time",
        "parameters": {
            "type": "object",
            "properties": {"zone": {"enum": ["utc", "cet"]}},
            "required": ["zone"],
            "additionalProperties": False,
        },
    },
}
TOOLS = {"get_weather": WEATHER, "get_time": CLOCK}


def _calls(result: Result) -> list[tuple[str, dict[str, Any]]]:
    return [
        (c.name, json.loads(c.arguments))
        for e in result.events
        if isinstance(e, Token)
        for c in e.tool_calls
    ]


def test_sampled_json_schema_answers_all_conform(tiny_dir: Path) -> None:
    fmt = ResponseFormat("json_schema", PERSON)

    async def body(pool):
        reqs = [
            request("A person, as JSON", max_tokens=160, sampling=SAMPLED, response_format=fmt)
            for _ in range(NUM_SAMPLED)
        ]
        return await asyncio.gather(*(collect(pool, r) for r in reqs))

    results = run_with_pool(tiny_dir, body, max_running=NUM_SAMPLED)
    for r in results:
        assert r.done.finish_reason == FinishReason.STOP, r.text
        jsonschema.validate(json.loads(r.text), PERSON)
    assert len({r.text for r in results}) > NUM_SAMPLED // 2  # sampled, not one fixed answer


def test_json_object_mode_on_a_text_completion(tiny_dir: Path) -> None:
    async def body(pool):
        req = request(
            prompt="Some JSON:",
            max_tokens=200,
            sampling=SamplingParams(temperature=1.0, seed=3),
            response_format=ResponseFormat("json_object"),
        )
        return await collect(pool, req)

    r = run_with_pool(tiny_dir, body)
    if r.done.finish_reason == FinishReason.STOP:
        assert isinstance(json.loads(r.text), dict)
    else:  # an open object may run long: it is cut, and says so
        assert r.done.finish_reason == FinishReason.LENGTH and r.text.startswith("{")


@pytest.mark.parametrize(
    ("choice", "names"),
    [
        ("required", {"get_weather", "get_time"}),
        ({"type": "function", "function": {"name": "get_time"}}, {"get_time"}),
    ],
)
def test_forced_tool_calls_always_call_a_right_tool_with_conforming_arguments(
    tiny_dir: Path, choice: Any, names: set[str]
) -> None:
    async def body(pool):
        reqs = [
            request(
                "What is the weather?",
                max_tokens=120,
                sampling=SAMPLED,
                tools=[WEATHER, CLOCK],
                tool_choice=choice,
                parallel_tool_calls=False,
            )
            for _ in range(NUM_SAMPLED)
        ]
        return await asyncio.gather(*(collect(pool, r) for r in reqs))

    results = run_with_pool(tiny_dir, body, max_running=NUM_SAMPLED)
    seen = set()
    for r in results:
        assert r.done.finish_reason == FinishReason.TOOL_CALLS, r.text
        [(name, arguments)] = _calls(r)
        assert name in names
        seen.add(name)
        jsonschema.validate(arguments, TOOLS[name]["function"]["parameters"])
        assert r.text == ""
    assert seen == names


def test_unconstrained_rows_get_their_tokens_alone_in_a_mixed_batch(tiny_dir: Path) -> None:
    prompts = ["Tell me a story", "Count to ten", "What is a llama?"]
    fmt = ResponseFormat("json_schema", PERSON)

    async def body(pool):
        alone = [await collect(pool, request(p, max_tokens=24)) for p in prompts]
        mixed = [request(p, max_tokens=24) for p in prompts]
        constrained = [
            request("A person", max_tokens=160, sampling=SAMPLED, response_format=fmt)
            for _ in range(5)
        ]
        tools = [
            request("weather", max_tokens=120, tools=[WEATHER], tool_choice="required")
            for _ in range(2)
        ]
        got = await asyncio.gather(*(collect(pool, r) for r in constrained + mixed + tools))
        return alone, got[5:8], got[:5]

    alone, mixed, constrained = run_with_pool(tiny_dir, body)
    assert [r.token_ids for r in mixed] == [r.token_ids for r in alone]
    for r in constrained:
        jsonschema.validate(json.loads(r.text), PERSON)


def test_max_tokens_before_the_structure_closes_is_length(tiny_dir: Path) -> None:
    async def body(pool):
        json_req = request(
            "A person", max_tokens=6, response_format=ResponseFormat("json_schema", PERSON)
        )
        tool_req = request("weather", max_tokens=6, tools=[WEATHER], tool_choice="required")
        return await collect(pool, json_req), await collect(pool, tool_req)

    as_json, as_tool = run_with_pool(tiny_dir, body)
    assert as_json.done.finish_reason == FinishReason.LENGTH
    assert as_json.text.startswith('{"name": "')
    assert as_tool.done.finish_reason == FinishReason.LENGTH
    assert _calls(as_tool) == []  # never an unfinished call presented as a call


def test_logprobs_and_stop_strings_with_a_grammar(tiny_dir: Path) -> None:
    fmt = ResponseFormat("json_schema", PERSON)

    async def body(pool):
        with_lp = request(
            "A person",
            max_tokens=160,
            sampling=SamplingParams(temperature=0.0, logprobs=True, top_logprobs=2),
            response_format=fmt,
        )
        stopped = request("A person", max_tokens=160, stop=['"age"'], response_format=fmt)
        return await collect(pool, with_lp), await collect(pool, stopped)

    with_lp, stopped = run_with_pool(tiny_dir, body)
    jsonschema.validate(json.loads(with_lp.text), PERSON)
    logprobs = [lp for e in with_lp.events if isinstance(e, Token) for lp in e.logprobs or []]
    assert len(logprobs) == with_lp.done.completion_tokens
    # The masked distribution: the chosen token is always the most likely allowed one.
    assert all(lp.logprob >= lp.top[0][1] - 1e-4 for lp in logprobs)
    assert stopped.done.finish_reason == FinishReason.STOP
    assert stopped.text.startswith('{"name": "') and '"age"' not in stopped.text


def test_prefix_cache_hits_keep_the_grammar(tiny_dir: Path, tmp_path: Path) -> None:
    prompt = "You are a form filler. " * 12 + "A person, please."
    fmt = ResponseFormat("json_schema", PERSON)

    async def main():
        cache = PrefixCache(CacheSettings(block_size=4), cold_dir=tmp_path / "cold")
        pool = LocalModelPool(
            Settings(engine=EngineSettings()),
            models={"tiny": tiny_dir},
            prefix_factory=cache.factory(),
        )
        try:
            first = await collect(pool, request(prompt, max_tokens=160, response_format=fmt))
            again = await collect(pool, request(prompt, max_tokens=160, response_format=fmt))
            return first, again
        finally:
            await pool.close(grace_s=0)
            cache.close()

    first, again = asyncio.run(main())
    assert again.done.cached_tokens > 0
    assert again.token_ids == first.token_ids
    jsonschema.validate(json.loads(again.text), PERSON)


def test_dflash_serves_constrained_requests_within_the_grammar(tiny_dir: Path) -> None:
    """A random draft's blocks are checked against the grammar: greedy answers equal the
    batch's token for token, sampled ones conform, a forced call calls the tool."""
    fmt = ResponseFormat("json_schema", PERSON)
    greedy = request("A person", max_tokens=160, response_format=fmt)
    call = request("weather", max_tokens=120, tools=[WEATHER], tool_choice="required")

    async def main(alt_paths):
        pool = LocalModelPool(Settings(), models={"tiny": tiny_dir}, alt_paths=alt_paths)
        try:
            out = [await collect(pool, greedy), await collect(pool, call)]
            if alt_paths:  # one at a time: DFlash serves a request alone
                for _ in range(4):
                    sampled = request(
                        "A person", max_tokens=160, sampling=SAMPLED, response_format=fmt
                    )
                    out.append(await collect(pool, sampled))
            return out
        finally:
            await pool.close(grace_s=0)

    batch = asyncio.run(main(None))
    path = DFlashPath("random")
    served = asyncio.run(main({"tiny": path}))
    assert {r.done.served_by for r in served} == {"dflash"}
    assert served[0].token_ids == batch[0].token_ids
    assert served[1].token_ids == batch[1].token_ids
    assert _calls(served[1]) and _calls(served[1])[0][0] == "get_weather"
    for r in [served[0], *served[2:]]:
        jsonschema.validate(json.loads(r.text), PERSON)
    assert len(path.recent_stats) == len(served)


def test_an_unenforceable_schema_fails_before_generation(tiny_dir: Path) -> None:
    async def body(pool):
        bad = ResponseFormat("json_schema", {"type": "array", "uniqueItems": True})
        with pytest.raises(InvalidRequest, match="uniqueItems"):
            await collect(pool, request("x", response_format=bad))

    run_with_pool(tiny_dir, body)
