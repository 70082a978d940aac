"""Limits, cancellation, context checks and loading."""

from __future__ import annotations

import asyncio

import pytest

from omlx.engine import loop as runner_module
from omlx.engine import mlx_backend
from omlx.engine.api import FinishReason, Started, Token
from omlx.errors import ContextTooLong, ModelNotFound, Overloaded
from tests.mlx.engine.engine_helpers import collect, request, run_with_pool

pytestmark = pytest.mark.timeout(180)


async def _first_token(gen):
    async for event in gen:
        if isinstance(event, Token):
            return event
    raise AssertionError("no token")


def test_cancel_frees_the_slot(tiny_dir):
    async def body(pool):
        long = pool.generate(request("go on forever", max_tokens=2000))
        await _first_token(long)
        engine = pool.loaded_engines()[0]
        assert engine.metrics.snapshot()[0].running == 1
        await long.aclose()  # the client went away
        # With max_running=1 and no queue, the next request only runs if the slot is free.
        result = await collect(pool, request("next", max_tokens=3))
        stats = engine.metrics.snapshot()[0]
        return result, stats

    result, stats = run_with_pool(tiny_dir, body, max_running=1, max_queued=0)
    assert result.done.completion_tokens == 3
    assert stats.running == 0


def test_pool_cancel_ends_the_stream_with_cancelled(tiny_dir):
    async def body(pool):
        req = request("go on", max_tokens=2000)
        events = []
        async for event in pool.generate(req):
            events.append(event)
            if isinstance(event, Token):
                pool.cancel(req.request_id)
        return events

    events = run_with_pool(tiny_dir, body)
    assert events[-1].finish_reason == FinishReason.CANCELLED
    assert events[-1].completion_tokens < 2000


def test_overloaded_past_running_plus_queued_limit(tiny_dir):
    async def body(pool):
        a = pool.generate(request("first", max_tokens=2000))
        b = pool.generate(request("second", max_tokens=2000))
        await _first_token(a)
        first_b = await b.__anext__()  # queued: admitted once a finishes
        with pytest.raises(Overloaded) as err:
            await pool.generate(request("third")).__anext__()
        await a.aclose()
        await b.aclose()
        return first_b, err.value

    first_b, error = run_with_pool(tiny_dir, body, max_running=1, max_queued=1)
    assert error.retry_after_s >= 1
    assert isinstance(first_b, Started)  # b got the slot a freed


def test_context_too_long_names_both_numbers(tiny_dir):
    async def body(pool):
        with pytest.raises(ContextTooLong) as too_long:
            await collect(pool, request(prompt_token_ids=[100] * 5000))
        clamped = await collect(pool, request(prompt_token_ids=[100] * 4090, max_tokens=None))
        return str(too_long.value), clamped

    too_long, clamped = run_with_pool(tiny_dir, body)
    assert "4096" in too_long and "5000" in too_long
    # Without max_tokens the budget is what is left of the context.
    assert clamped.started.max_tokens == 6
    assert clamped.done.completion_tokens <= 6


def test_max_tokens_past_the_context_is_clamped_or_refused_when_strict(tiny_dir):
    """Agents ask for 16k-64k whatever the model: by default they get the room left."""

    async def clamp(pool):
        return await collect(pool, request(prompt_token_ids=[100] * 4090, max_tokens=64000))

    async def strict(pool):
        with pytest.raises(ContextTooLong) as no_room:
            await collect(pool, request(prompt_token_ids=[100] * 100, max_tokens=4000))
        return str(no_room.value)

    clamped = run_with_pool(tiny_dir, clamp)
    assert clamped.started.max_tokens == 6  # 4096 - 4090
    assert 1 <= clamped.done.completion_tokens <= 6
    no_room = run_with_pool(tiny_dir, strict, strict_max_tokens=True)
    assert "4096" in no_room and "4100" in no_room


def test_unknown_model_is_model_not_found(tiny_dir):
    async def body(pool):
        with pytest.raises(ModelNotFound):
            await collect(pool, request(model="no-such-model"))

    run_with_pool(tiny_dir, body)


def test_concurrent_first_requests_load_once(tiny_dir, monkeypatch):
    calls = []
    real = mlx_backend.load_text_model

    def counting(name, path, **options):
        calls.append(name)
        return real(name, path, **options)

    monkeypatch.setattr(mlx_backend, "load_text_model", counting)

    async def body(pool):
        return await asyncio.gather(
            *(collect(pool, request(f"hi {i}", max_tokens=2)) for i in range(4))
        )

    results = run_with_pool(tiny_dir, body)
    assert calls == ["tiny"]
    assert all(r.done.completion_tokens == 2 for r in results)


def test_chunked_prefill_keeps_running_streams_decoding(tiny_dir):
    """While a long prompt prefills, running streams still get tokens (no timing asserts)."""

    async def body(pool):
        streams = [pool.generate(request(f"stream {i}", max_tokens=3000)) for i in range(2)]
        for s in streams:
            await _first_token(s)
        engine = pool.loaded_engines()[0]
        counts = [0, 0]
        prefilling = asyncio.Event()
        first_token = asyncio.Event()

        async def drain(i, gen):
            async for event in gen:
                if isinstance(event, Token) and prefilling.is_set() and not first_token.is_set():
                    counts[i] += 1
                if first_token.is_set():
                    return

        tasks = [asyncio.create_task(drain(i, s)) for i, s in enumerate(streams)]
        long = pool.generate(request(prompt_token_ids=list(range(1000, 3500)), max_tokens=1))
        progress = 0
        async for event in long:
            if isinstance(event, Started):
                prefilling.set()
            elif type(event).__name__ == "Progress":
                progress += 1
            elif isinstance(event, Token):
                first_token.set()
        await asyncio.gather(*tasks)
        for s in streams:
            await s.aclose()
        return counts, progress, engine.engine_loop.decode_steps_during_prefill

    counts, progress, mixed_steps = run_with_pool(tiny_dir, body, prefill_step_tokens=512)
    # A 2500-token prompt in one 512-token chunk per step would give at most ~5 mixed steps;
    # the pacer cuts it finer, so the streams keep decoding throughout.
    assert mixed_steps >= 6
    assert progress >= 6
    assert min(counts) >= 6


@pytest.mark.parametrize(("paced_prompt_tokens", "paced"), [(256, False), (0, True)])
def test_short_prompts_join_at_once_long_ones_are_paced(tiny_dir, paced_prompt_tokens, paced):
    """A prompt no longer than engine.paced_prompt_tokens is prefilled in one chunk."""

    async def body(pool):
        stream = pool.generate(request("stream", max_tokens=3000))
        await _first_token(stream)
        engine = pool.loaded_engines()[0]
        before = engine.engine_loop.decode_steps_during_prefill
        short = pool.generate(request(prompt_token_ids=list(range(1000, 1200)), max_tokens=1))
        async for _ in short:
            pass
        await stream.aclose()
        return engine.engine_loop.decode_steps_during_prefill - before

    mixed_steps = run_with_pool(
        tiny_dir, body, prefill_step_tokens=512, paced_prompt_tokens=paced_prompt_tokens
    )
    if paced:
        assert mixed_steps >= 2  # cut into paced chunks beside the decoding stream
    else:
        assert mixed_steps == 1  # all 200 tokens in one step


def test_a_failing_step_fails_its_requests_and_the_engine_goes_on(tiny_dir, monkeypatch):
    real = runner_module.EngineLoop._batch_step
    calls = []

    def flaky(self):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("simulated MLX failure")
        return real(self)

    monkeypatch.setattr(runner_module.EngineLoop, "_batch_step", flaky)

    async def body(pool):
        with pytest.raises(RuntimeError, match="simulated"):
            await collect(pool, request("first", max_tokens=8))
        return await collect(pool, request("second", max_tokens=3))

    result = run_with_pool(tiny_dir, body)
    assert result.done.completion_tokens == 3


def test_a_burst_beyond_max_running_queues_and_completes(tiny_dir):
    async def body(pool):
        alone = await collect(pool, request("burst", max_tokens=6))
        burst = await asyncio.gather(
            *(collect(pool, request("burst", max_tokens=6)) for _ in range(24))
        )
        return alone, burst, pool.loaded_engines()[0].metrics.snapshot()[0]

    alone, burst, stats = run_with_pool(tiny_dir, body, max_running=4, max_queued=32)
    assert all(r.token_ids == alone.token_ids for r in burst)
    assert stats.running == 0 and stats.queued == 0 and stats.requests_total == 25


def test_cancel_during_prefill_frees_the_slot(tiny_dir):
    async def body(pool):
        stream = pool.generate(request("keep going", max_tokens=2000))
        await _first_token(stream)
        long = pool.generate(request(prompt_token_ids=list(range(1000, 3500)), max_tokens=5))
        async for event in long:
            if type(event).__name__ == "Progress":
                break  # the prompt is part-way through its prefill
        await long.aclose()
        # max_running=2: "after" only runs if the cancelled prompt's slot was freed.
        after = await collect(pool, request("after", max_tokens=2))
        stats = pool.loaded_engines()[0].metrics.snapshot()[0]
        await stream.aclose()
        return after, stats

    after, stats = run_with_pool(tiny_dir, body, max_running=2, max_queued=0)
    assert after.done.completion_tokens == 2
    assert stats.running == 1  # only the first stream
