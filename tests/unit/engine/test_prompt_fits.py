"""A prompt that cannot fit the context window is refused before templating/tokenizing."""

from __future__ import annotations

import pytest

from omlx.engine.api import ChatMessage, GenerationRequest, RequestId
from omlx.engine.text.validation import MAX_BYTES_PER_TOKEN, check_prompt_fits, prompt_text_bytes
from omlx.errors import ContextTooLong


def _chat(*contents: object, tools: list | None = None) -> GenerationRequest:
    messages = [ChatMessage(role="user", content=c) for c in contents]  # type: ignore[arg-type]
    return GenerationRequest(RequestId("r"), "m", messages=messages, tools=tools)


def test_bytes_count_text_parts_tools_not_images() -> None:
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "A" * 10_000}}
    req = _chat("héllo", [{"type": "text", "text": "abc"}, image], tools=[{"name": "f"}])
    assert prompt_text_bytes(req) == 6 + 3 + len('[{"name": "f"}]')


@pytest.mark.parametrize("ctx", [2048, 131072])
def test_window_times_bound_is_the_line(ctx: int) -> None:
    limit = ctx * MAX_BYTES_PER_TOKEN
    check_prompt_fits(_chat("x" * limit), ctx)
    with pytest.raises(ContextTooLong, match=f"{limit + 1} bytes"):
        check_prompt_fits(_chat("x" * (limit + 1)), ctx)
    text = GenerationRequest(RequestId("r"), "m", prompt="y" * (limit + 1))
    with pytest.raises(ContextTooLong) as e:
        check_prompt_fits(text, ctx)
    assert e.value.param == "prompt"


def test_token_ids_longer_than_the_window() -> None:
    ids = GenerationRequest(RequestId("r"), "m", prompt_token_ids=[1] * 100)
    check_prompt_fits(ids, 101)
    with pytest.raises(ContextTooLong, match="100 tokens"):
        check_prompt_fits(ids, 100)
    check_prompt_fits(ids, None)  # no known window: the tokenizer path decides
