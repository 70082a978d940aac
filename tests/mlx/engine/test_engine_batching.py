"""Batched generation: greedy equivalence, seeded sampling, stops, limits."""

from __future__ import annotations

import asyncio

import pytest

from omlx.engine.api import FinishReason, SamplingParams
from tests.mlx.engine.engine_helpers import collect, request, run_with_pool

pytestmark = pytest.mark.timeout(180)

MIXED = [
    SamplingParams(temperature=0.9, top_p=0.9),
    SamplingParams(temperature=1.2, top_k=20),
    SamplingParams(temperature=0.7, min_p=0.1, seed=3),
    SamplingParams(temperature=0.0, repetition_penalty=1.3),
    SamplingParams(temperature=1.0, presence_penalty=1.0, frequency_penalty=0.5),
    SamplingParams(temperature=0.8, logit_bias={100: 5.0}, logprobs=True, top_logprobs=3),
    SamplingParams(temperature=1.0, seed=11),
]


def test_greedy_inside_a_mixed_batch_of_8_equals_alone(tiny_dir):
    async def body(pool):
        alone = await collect(pool, request("tell me about the sea", max_tokens=24))
        others = [
            request(f"prompt number {i} " * (i + 1), max_tokens=24, sampling=s)
            for i, s in enumerate(MIXED)
        ]
        target = request("tell me about the sea", max_tokens=24)
        results = await asyncio.gather(
            *(collect(pool, r) for r in [*others[:4], target, *others[4:]])
        )
        return alone, results[4], results

    alone, batched, results = run_with_pool(tiny_dir, body)
    assert len(alone.token_ids) == 24
    assert batched.token_ids == alone.token_ids
    assert batched.text == alone.text
    # The batch really ran together: the other requests produced their own output.
    assert all(r.done.completion_tokens == 24 for r in results)


def test_seeded_sampling_is_reproducible_alone_and_batched(tiny_dir):
    seeded = SamplingParams(temperature=1.0, seed=1234)

    async def body(pool):
        a = await collect(pool, request("roll the dice", sampling=seeded, max_tokens=20))
        b = await collect(pool, request("roll the dice", sampling=seeded, max_tokens=20))
        c = await collect(
            pool,
            request(
                "roll the dice", max_tokens=20, sampling=SamplingParams(temperature=1.0, seed=99)
            ),
        )
        others = [request(f"other {i}", sampling=s, max_tokens=20) for i, s in enumerate(MIXED)]
        batch = await asyncio.gather(
            collect(pool, request("roll the dice", sampling=seeded, max_tokens=20)),
            *(collect(pool, r) for r in others),
        )
        return a, b, c, batch[0]

    a, b, c, in_batch = run_with_pool(tiny_dir, body)
    assert a.token_ids == b.token_ids
    assert in_batch.token_ids == a.token_ids
    assert c.token_ids != a.token_ids


def test_max_tokens_gives_finish_reason_length(tiny_dir):
    result = run_with_pool(tiny_dir, lambda pool: collect(pool, request(max_tokens=5)))
    assert result.done.finish_reason == FinishReason.LENGTH
    assert result.done.completion_tokens == 5
    assert len(result.token_ids) == 5
    assert result.started.prompt_tokens == result.done.prompt_tokens > 0


def test_stop_string_split_across_tokens_is_never_emitted(tiny_dir):
    async def body(pool):
        free = await collect(pool, request("a story please", max_tokens=30))
        # A stop string spanning the boundary between the 4th and 5th token's text.
        pieces = [e.text for e in free.events if getattr(e, "text", "")]
        boundary = len("".join(pieces[:4]))
        stop = free.text[boundary - 2 : boundary + 2]
        assert len(stop) == 4
        stopped = await collect(pool, request("a story please", max_tokens=30, stop=[stop]))
        return free, stopped, stop

    free, stopped, stop = run_with_pool(tiny_dir, body)
    assert stop not in stopped.text
    assert stopped.text == free.text[: free.text.index(stop)]
    assert stopped.done.finish_reason == FinishReason.STOP
    assert stopped.done.stop_sequence == stop


def test_logprobs_are_reported_per_token(tiny_dir):
    params = SamplingParams(temperature=0.0, logprobs=True, top_logprobs=3)
    result = run_with_pool(
        tiny_dir, lambda pool: collect(pool, request("numbers", sampling=params, max_tokens=4))
    )
    lps = [lp for e in result.events for lp in (getattr(e, "logprobs", None) or [])]
    assert len(lps) == 4
    for lp in lps:
        assert lp.logprob <= 0.0
        assert len(lp.top) == 3
        # Greedy: the chosen token is the most likely one.
        assert lp.top[0][1] == pytest.approx(lp.logprob, abs=1e-4)


def test_any_int_seed_is_accepted(tiny_dir):
    async def body(pool):
        neg = SamplingParams(temperature=1.0, seed=-5)
        big = SamplingParams(temperature=1.0, seed=2**70)
        return await asyncio.gather(
            collect(pool, request(sampling=neg, max_tokens=3)),
            collect(pool, request(sampling=big, max_tokens=3)),
        )

    results = run_with_pool(tiny_dir, body)
    assert [r.done.completion_tokens for r in results] == [3, 3]
