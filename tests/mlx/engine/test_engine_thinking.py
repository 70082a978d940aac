"""thinking_budget_tokens: the engine closes the reasoning block once its budget is spent."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from omlx.pool.pool import LocalModelPool
from omlx.settings import Settings
from tests.fixtures.tiny_tokenizer import tokenizer_vocab
from tests.mlx.engine.engine_helpers import collect, request

pytestmark = pytest.mark.timeout(120)

THINK_END = "</think>"


def test_budget_forces_the_end_of_thinking(tiny_qwen3_dir):
    prompt = "<|im_start|>user\nthink hard<|im_end|>\n<|im_start|>assistant\n<think>\n"

    async def main():
        pool = LocalModelPool(Settings(), models={"q": tiny_qwen3_dir})
        try:
            free = await collect(pool, request(prompt=prompt, model="q", max_tokens=24))
            budgeted = await collect(
                pool,
                dataclasses.replace(
                    request(prompt=prompt, model="q", max_tokens=24), thinking_budget_tokens=5
                ),
            )
            return free, budgeted
        finally:
            await pool.close(grace_s=0)

    free, budgeted = asyncio.run(main())
    reasoning = "".join(getattr(e, "reasoning", "") for e in budgeted.events)
    assert reasoning  # the output started inside the reasoning block
    assert budgeted.text  # and went on with an answer after the forced </think>
    assert THINK_END not in budgeted.text and THINK_END not in reasoning
    # Five reasoning tokens, at most one more (observation lags sampling), then the close.
    end = tokenizer_vocab()[THINK_END]
    assert end not in free.token_ids[:8]  # left alone, the model would not close it there
    ids = budgeted.token_ids
    assert ids[:5] == free.token_ids[:5]
    assert end in ids and 5 <= ids.index(end) <= 6
