"""The engine with the real prefix cache: cached prefill gives the cold prefill's tokens."""

from __future__ import annotations

import asyncio

import pytest

from omlx.cache.prefix_cache import PrefixCache
from omlx.engine.api import Done, FinishReason, Token
from omlx.pool.pool import LocalModelPool
from omlx.settings import CacheSettings, EngineSettings, Settings
from tests.mlx.engine.engine_helpers import collect, request

pytestmark = pytest.mark.timeout(180)


def _run(model_dir, tmp_path, body):
    async def main():
        cache = PrefixCache(CacheSettings(block_size=4), cold_dir=tmp_path / "cold")
        pool = LocalModelPool(
            Settings(engine=EngineSettings()),
            models={"tiny": model_dir},
            prefix_factory=cache.factory(),
        )
        try:
            return await asyncio.wait_for(body(pool), timeout=120)
        finally:
            await pool.close(grace_s=0)
            cache.close()

    return asyncio.run(main())


@pytest.mark.parametrize(
    "arch,gather", [("llama", False), ("llama", True), ("hybrid", False), ("hybrid", True)]
)
def test_cached_prefill_matches_cold(arch, gather, tiny_model_dirs, tmp_path, monkeypatch):
    """`gather`: finished rows leave as on a GPU (one gather a layer, cut when stored)."""
    from omlx.mlx_lm_compat import batch_join

    monkeypatch.setattr(batch_join, "gathers_leaving_rows", lambda: gather)
    prompt = list(range(300, 341))  # 41 tokens: 10 full blocks of 4

    async def body(pool):
        cold = await collect(pool, request(prompt_token_ids=prompt, max_tokens=12))
        warm = await collect(pool, request(prompt_token_ids=prompt, max_tokens=12))
        longer = await collect(pool, request(prompt_token_ids=[*prompt, 7, 8, 9], max_tokens=6))
        return cold, warm, longer

    cold, warm, longer = _run(tiny_model_dirs[arch], tmp_path, body)
    assert cold.started.cached_tokens == 0
    assert warm.started.cached_tokens > 0
    assert warm.done.cached_tokens == warm.started.cached_tokens
    assert warm.token_ids == cold.token_ids
    assert longer.started.cached_tokens >= 36


def test_a_cancelled_request_leaves_its_prefix_for_the_retry(tiny_model_dirs, tmp_path):
    """Agents cancel and resend the same long prompt: the retry prefills only the rest."""
    prompt = list(range(300, 341))  # 41 tokens: 10 full blocks of 4

    async def body(pool):
        req = request(prompt_token_ids=prompt, max_tokens=500)
        seen = 0
        async for event in pool.generate(req):
            if isinstance(event, Token):
                seen += 1
                if seen == 3:
                    pool.cancel(req.request_id)
            if isinstance(event, Done):
                cancelled = event
        retry = await collect(pool, request(prompt_token_ids=prompt, max_tokens=2))
        return cancelled, retry

    cancelled, retry = _run(tiny_model_dirs["llama"], tmp_path, body)
    assert cancelled.finish_reason == FinishReason.CANCELLED
    assert cancelled.completion_tokens >= 3
    assert retry.started.cached_tokens >= 40  # every full block of the prompt
