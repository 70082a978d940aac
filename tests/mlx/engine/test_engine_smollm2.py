"""The real default model through the engine: a chat answer that makes sense."""

from __future__ import annotations

import pytest

from omlx.engine.api import ChatMessage, FinishReason, SamplingParams
from tests.mlx.engine.engine_helpers import collect, request, run_with_pool

pytestmark = [pytest.mark.realmodel, pytest.mark.timeout(300)]


def test_smollm2_says_paris(smollm2_dir):
    async def body(pool):
        return await collect(
            pool,
            request(
                max_tokens=12,
                sampling=SamplingParams(temperature=0.0),
                messages=[
                    ChatMessage("system", "You are a helpful assistant."),
                    ChatMessage("user", "What is the capital of France?"),
                ],
            ),
        )

    result = run_with_pool(smollm2_dir, body)
    assert "Paris" in result.text
    assert result.done.finish_reason in (FinishReason.STOP, FinishReason.LENGTH)
    assert "<|im_end|>" not in result.text
