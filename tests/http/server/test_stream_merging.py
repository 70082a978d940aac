"""Tokens that queue up behind a slow renderer reach the client merged, never reordered.

The fake pool hands a script's events over in one burst (no step between them), so every
Token is queued before the response renders the first: the case of an event loop that
falls behind the engine.
"""

from __future__ import annotations

import json

import httpx
import openai

from omlx.engine.api import Token, TokenLogprob, ToolCall
from omlx.server.event_stream import merge_tokens
from tests.fixtures.fake_pool import FakeModelPool, text_script
from tests.fixtures.live_server import LiveServer

CHAT = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "stream": True}


def _deltas(server: LiveServer, body: dict) -> list[dict]:
    out = []
    with httpx.stream("POST", server.base_url + "/v1/chat/completions", json=body) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data: {"):
                chunk = json.loads(line[len("data: ") :])
                if chunk["choices"]:
                    out.append(chunk["choices"][0]["delta"])
    return out


def test_merge_joins_text_ids_and_logprobs() -> None:
    lp = [TokenLogprob("a", -0.1, [])]
    a = Token("r", "a", [1], logprobs=lp)
    b = Token("r", "b", [2, 3], logprobs=[TokenLogprob("b", -0.2, [])])
    merged = merge_tokens(a, b)
    assert merged is not None
    assert (merged.text, merged.token_ids, merged.reasoning) == ("ab", [1, 2, 3], "")
    assert [x.token for x in merged.logprobs or []] == ["a", "b"]
    thought = merge_tokens(Token("r", "", [1], "th"), Token("r", "", [2], "ink"))
    assert thought is not None and (thought.reasoning, thought.text) == ("think", "")
    assert merge_tokens(Token("r", "a", [1]), Token("r", "b", [2])).logprobs is None  # type: ignore[union-attr]


def test_merge_refuses_mixed_kinds_and_tool_calls() -> None:
    call = ToolCall(id="c", name="f", arguments="{}")
    assert merge_tokens(Token("r", "", [1], "think"), Token("r", "text", [2])) is None
    assert merge_tokens(Token("r", "text", [1]), Token("r", "", [2], "think")) is None
    assert merge_tokens(Token("r", "a", [1]), Token("r", "", [2], tool_calls=[call])) is None
    assert merge_tokens(Token("r", "", [1], tool_calls=[call]), Token("r", "a", [2])) is None


def test_burst_of_tokens_arrives_merged_with_every_logprob(
    pool: FakeModelPool, client: openai.OpenAI
) -> None:
    pieces = ["a", "b", "c", "d", "e", "f"]
    pool.script_for = lambda req: text_script(pieces, logprobs=True)
    stream = client.chat.completions.create(
        model="fake-model",
        messages=[{"role": "user", "content": "hi"}],
        stream=True,
        logprobs=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    content = [c.choices[0] for c in chunks if c.choices and c.choices[0].delta.content]
    assert "".join(c.delta.content for c in content) == "abcdef"
    assert len(content) < len(pieces)  # merged, not one frame per token
    tokens = [t.token for c in content for t in c.logprobs.content]
    assert tokens == pieces
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == len(pieces)


def test_burst_keeps_reasoning_content_and_tool_calls_apart_and_in_order(
    pool: FakeModelPool, server: LiveServer
) -> None:
    call = ToolCall(id="call_1", name="f", arguments='{"x": 1}')
    pool.script_for = lambda req: text_script(
        ["A", "B"], reasoning=["r1", "r2", "r3"], tool_calls=[call]
    )
    deltas = _deltas(server, CHAT)
    kinds = []
    for d in deltas:
        present = [k for k in ("reasoning_content", "content", "tool_calls") if d.get(k)]
        assert len(present) <= 1, d  # one kind per frame
        kinds += present
    order = [k for i, k in enumerate(kinds) if i == 0 or kinds[i - 1] != k]
    assert order == ["reasoning_content", "content", "tool_calls"]
    assert "".join(d.get("reasoning_content") or "" for d in deltas) == "r1r2r3"
    assert "".join(d.get("content") or "" for d in deltas) == "AB"


def test_burst_counts_reasoning_tokens_exactly(pool: FakeModelPool, client: openai.OpenAI) -> None:
    # Responses counts a Token's ids as reasoning when it carries reasoning: a Token
    # merged across the reasoning/content boundary would count the answer's tokens too.
    pool.script_for = lambda req: text_script(["A", "B"], reasoning=["r1", "r2", "r3"])
    events = list(client.responses.create(model="fake-model", input="hi", stream=True))
    done = events[-1]
    assert done.type == "response.completed"
    assert done.response.usage is not None
    assert done.response.usage.output_tokens_details.reasoning_tokens == 3
    assert done.response.output_text == "AB"


def test_held_back_events_keep_their_order_ahead_of_later_tokens() -> None:
    """admit() reads (and may merge) the first event, then pushes it back: what the merge
    held back must still come out before tokens queued after it."""
    import asyncio

    from omlx.engine.api import Done, FinishReason, GenerationRequest
    from omlx.server.event_stream import EventStream

    script = [
        Token("r", "a", [1]),
        Token("r", "b", [2]),
        Token("r", "", [3], "think"),  # cannot join: held back by the merge
        Token("r", "c", [4]),
        Done("r", FinishReason.STOP, 1, 4),
    ]

    class BurstPool:
        async def generate_into(self, request, deliver) -> None:
            for event in script:
                deliver(event)

    async def read() -> list[Token | Done | None]:
        stream = EventStream(BurstPool(), GenerationRequest(request_id="r", model="m"))  # type: ignore[arg-type]
        await asyncio.sleep(0)  # the pool delivers everything
        first = await stream.next()
        stream.push_back(first)  # as admit() does
        return [await stream.next(timeout_s=5) for _ in range(4)]

    events = asyncio.run(read())
    texts = [(e.text, e.reasoning) for e in events if isinstance(e, Token)]
    assert texts == [("ab", ""), ("", "think"), ("c", "")]
    assert isinstance(events[-1], Done)
