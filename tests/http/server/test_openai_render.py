"""Chunk rendering without a server: the spliced fast path equals the Struct encoding."""

from __future__ import annotations

import json

import pytest

from omlx.engine.api import Done, FinishReason, RequestId, Token
from omlx.schemas import openai as oa
from omlx.server.openai_render import ChatChunker
from omlx.server.sse import frame

RID = RequestId("chatcmpl-x")


@pytest.mark.parametrize("include_usage", [False, True])
@pytest.mark.parametrize("text", ["plain", 'quo"te\\ and\nnewline', "é中文 🙂", "\x00"])
def test_content_fast_path_matches_struct_encoding(include_usage: bool, text: str) -> None:
    chunker = ChatChunker(
        request_id=RID, model="m/odel", include_usage=include_usage, want_logprobs=False
    )
    frames = chunker.render(Token(RID, text=text, token_ids=[1]))
    assert frames[1] == frame(chunker.chunk(oa.Delta(content=text)))
    assert json.loads(frames[1][6:])["choices"][0]["delta"] == {"content": text}


def test_stream_sequence() -> None:
    chunker = ChatChunker(request_id=RID, model="m", include_usage=True, want_logprobs=False)
    frames = [
        *chunker.render(Token(RID, text="a", token_ids=[1])),
        *chunker.render(Token(RID, text="", token_ids=[2], reasoning="r")),
        *chunker.render(Done(RID, FinishReason.STOP, 3, 2, 1)),
    ]
    assert frames[-1] == b"data: [DONE]\n\n"
    bodies = [json.loads(f[6:]) for f in frames[:-1]]
    assert [b["choices"][0]["delta"] for b in bodies[:4]] == [
        {"role": "assistant", "content": ""},
        {"content": "a"},
        {"reasoning_content": "r"},
        {},
    ]
    assert bodies[3]["choices"][0]["finish_reason"] == "stop"
    assert bodies[4]["choices"] == []
    assert bodies[4]["usage"]["prompt_tokens_details"] == {"cached_tokens": 1}
    assert all(b["usage"] is None for b in bodies[:4])
