"""A vision model whose vocabulary is padded past its tokenizer (the tiny qwen2_vl's, as
real Qwen2-VL checkpoints are): ids with no text are never sampled, where mlx-vlm's
detokenizer would fail on them (a 500 in the middle of a chat)."""

from __future__ import annotations

import mlx.core as mx
import pytest

from omlx.engine.api import ChatMessage, Done, GenerationRequest, SamplingParams, Token
from omlx.workers.vlm import generate_vlm, load_vlm, text_token_limit
from tests.fixtures.tiny_vlm import build_tiny_qwen2_vl

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def vlm(tmp_path_factory):
    return load_vlm("tiny-vlm", build_tiny_qwen2_vl(tmp_path_factory.mktemp("vlm") / "m"))


def test_the_fixture_pads_its_vocabulary_past_the_tokenizer(vlm):
    limit = text_token_limit(vlm.processor)
    assert vlm.text_tokens == limit  # read once, at load
    assert limit is not None and limit < vlm.model.config.text_config.vocab_size


def test_ids_without_text_are_never_sampled_even_where_the_model_prefers_them(vlm):
    """A checkpoint can put weight on its padding ids; here the padding's logits are
    raised far above the rest, so every unguarded draw would be one of them."""
    limit = text_token_limit(vlm.processor)
    embed = vlm.model.language_model.model.embed_tokens
    head = embed.as_linear
    n = vlm.model.config.text_config.vocab_size
    raise_padding = mx.where(mx.arange(n) >= limit, 30.0, 0.0)
    embed.as_linear = lambda x: head(x) + raise_padding
    try:
        events = []
        request = GenerationRequest(
            request_id="r",
            model="tiny-vlm",
            messages=[ChatMessage(role="user", content="hello")],
            max_tokens=40,
            sampling=SamplingParams(temperature=1.0),
        )
        generate_vlm(vlm, request, [], events.append)
    finally:
        del embed.as_linear
    tokens = [t for e in events if isinstance(e, Token) for t in e.token_ids]
    assert isinstance(events[-1], Done) and events[-1].completion_tokens == 40
    assert tokens and max(tokens) < limit
