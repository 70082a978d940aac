"""The prefix cache behind the live server: cached_tokens, identical greedy output, restart."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from omlx.cache.prefix_cache import PrefixCache
from omlx.pool.pool import LocalModelPool
from omlx.server.app import create_app
from omlx.settings import CacheSettings, EngineSettings, Settings
from tests.fixtures.live_server import LiveServer, running_server

pytestmark = pytest.mark.timeout(240)

LONG = "The quick brown fox jumps over the lazy dog while the cat watches. " * 6


@contextlib.contextmanager
def _serve(model_dir: Path, cold_dir: Path) -> Iterator[tuple[LiveServer, PrefixCache]]:
    """One server 'process': its own pool and PrefixCache over the shared cold dir."""
    settings = Settings(
        engine=EngineSettings(prefill_step_tokens=64),
        cache=CacheSettings(block_size=16, hot_budget_bytes=64 * 1024**2),
    )
    cache = PrefixCache(settings.cache, cold_dir, cold_cap_bytes=512 * 1024**2)
    pool = LocalModelPool(
        settings, models={"tiny": model_dir}, prefix_factory=cache.factory(),
        cache_stats=cache.stats,
    )  # fmt: skip
    app = create_app(pool, settings, close_pool_on_shutdown=True, kv_cache=cache)
    try:
        with running_server(app, settings) as live:
            yield live, cache
    finally:
        cache.close()  # spills the hot tier to disk, as a clean shutdown does


def _ask(live: LiveServer, text: str) -> tuple[str, int, int]:
    client = openai.OpenAI(base_url=live.openai_base_url, api_key="x", max_retries=0, timeout=60)
    r = client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": text}], max_tokens=12, temperature=0
    )
    cached = r.usage.prompt_tokens_details.cached_tokens if r.usage.prompt_tokens_details else 0
    return r.choices[0].message.content or "", r.usage.prompt_tokens, cached or 0


def test_hit_and_restart_keep_the_output(tiny_llama_dir: Path, tmp_path: Path) -> None:
    cold = tmp_path / "cold"
    with _serve(tiny_llama_dir, cold) as (live, cache):
        first, prompt_tokens, cached = _ask(live, LONG)
        assert cached == 0 and prompt_tokens > 48
        again, _, cached = _ask(live, LONG)
        assert again == first
        assert cached == prompt_tokens - 1  # whole blocks plus the partial last one
        assert cache.stats().hits == 1
    assert any(cold.rglob("*.safetensors"))

    with _serve(tiny_llama_dir, cold) as (live, cache):
        assert cache.stats().cold.blocks > 0
        after, _, cached = _ask(live, LONG)
        # Partial blocks live in RAM only: after a restart whole blocks are what is left.
        assert cached >= (prompt_tokens - 1) // 16 * 16 - 16 and cached % 16 == 0
        assert cached > 0 and after == first
        assert cache.stats().hits == 1 and cache.stats().hot.blocks > 0  # promoted


def test_two_concurrent_requests_sharing_a_prefix(tiny_llama_dir: Path, tmp_path: Path) -> None:
    async def both(live: LiveServer) -> list[tuple[str, int]]:
        client = openai.AsyncOpenAI(base_url=live.openai_base_url, api_key="x", max_retries=0)
        rs = await asyncio.gather(*(
            client.chat.completions.create(
                model="tiny", max_tokens=12, temperature=0,
                messages=[{"role": "user", "content": LONG + tail}])
            for tail in ("Why?", "And then what happened next?")
        ))  # fmt: skip
        return [(r.choices[0].message.content or "",
                 r.usage.prompt_tokens_details.cached_tokens or 0) for r in rs]  # fmt: skip

    with _serve(tiny_llama_dir, tmp_path / "cold") as (live, _):
        reference = asyncio.run(both(live))  # nothing cached yet: full prefills
        assert [c for _, c in reference] == [0, 0]
        _ask(live, LONG)  # stores the shared prefix
        shared = asyncio.run(both(live))
    assert [t for t, _ in shared] == [t for t, _ in reference]
    assert all(c > 0 for _, c in shared)


def test_cache_admin_routes(tiny_llama_dir: Path, tmp_path: Path) -> None:
    import httpx

    with _serve(tiny_llama_dir, tmp_path / "cold") as (live, cache):
        _ask(live, LONG)
        stats = httpx.get(f"{live.base_url}/api/stats", timeout=10).json()
        assert stats["cache"]["enabled"] and stats["cache"]["hot"]["blocks"] > 0
        report = httpx.get(f"{live.base_url}/api/cache/stats", timeout=10).json()
        [model] = report["models"]
        assert model["model"] == tiny_llama_dir.name and model["hot"]["blocks"] > 0
        bad = httpx.post(f"{live.base_url}/api/cache/clear", params={"tier": "warm"})
        assert bad.status_code == 400 and "tier" in bad.json()["error"]["message"]
        missing = httpx.post(f"{live.base_url}/api/cache/clear", params={"model": "nope"})
        assert missing.status_code == 404
        cleared = httpx.post(f"{live.base_url}/api/cache/clear", params={"model": model["model"]})
        assert cleared.status_code == 200 and cleared.json() == model["hot"]["blocks"]
        assert cache.stats().hot.blocks == 0
        _, _, cached = _ask(live, LONG)
        assert cached == 0


def test_debug_log_says_where_a_prompt_diverged(
    tiny_llama_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("DEBUG", logger="omlx.cache.model_cache")
    with _serve(tiny_llama_dir, tmp_path / "cold") as (live, _):
        _ask(live, LONG)
        # Same text but a changed head word (think: a date in the system prompt).
        _, prompt_tokens, cached = _ask(live, LONG.replace("quick", "slow", 1))
    lines = [r.getMessage() for r in caplog.records if "shares the first" in r.getMessage()]
    assert lines, [r.getMessage() for r in caplog.records]
    assert f"prompt of {prompt_tokens} tokens shares the first" in lines[-1]
    # Less than one block is shared (the template's head): all of it is reused.
    shared = int(lines[-1].split("shares the first ")[1].split()[0])
    assert 0 < shared < 16 and cached == shared
    assert f"reused {cached} cached tokens" in lines[-1]
