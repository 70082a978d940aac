"""Cached vs uncached greedy decoding emits identical tokens (hot hit, cold hit, restart)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from omlx.cache.prefix_cache import PrefixCache
from omlx.settings import CacheSettings
from tests.mlx.cache.conftest import greedy

# Differential against stock mlx-lm: `pytest -m mlx_lm_diff` checks a newer mlx-lm.
pytestmark = pytest.mark.mlx_lm_diff

B = 4


def _prompt(n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(1, 128) for _ in range(n)]


def _cache(tmp_path: Path, hot_budget_bytes: int = 64 * 1024**2) -> PrefixCache:
    settings = CacheSettings(block_size=B, hot_budget_bytes=hot_budget_bytes)
    return PrefixCache(settings, tmp_path / "cold", cold_cap_bytes=256 * 1024**2)


def _turn(tiny_model, cache: PrefixCache) -> tuple[list[int], list[int]]:
    """Serve turn 1 (stored), then turn 2 = turn 1 + reply + new text, cached; check both."""
    arch, model = tiny_model
    mc = cache.for_model(f"fp-{arch}", model, model_name=arch)
    first = _prompt(30, seed=1)
    _, kv, tokens = greedy(model, first, 6)
    assert len(tokens) == 36
    mc.store(tokens, kv)
    cache.flush()
    second = tokens + _prompt(7, seed=2)
    return mc, second


def _check(mc, model, prompt: list[int], expect_cached: int) -> None:
    reference, _, _ = greedy(model, prompt, 8)
    seeded, num_cached = mc.fetch(prompt)
    assert num_cached == expect_cached
    got, _, _ = greedy(model, prompt, 8, cache=seeded, num_cached=num_cached)
    assert got == reference


def test_hot_hit_same_greedy_output(tiny_model, tmp_path: Path) -> None:
    cache = _cache(tmp_path)
    mc, second = _turn(tiny_model, cache)
    _check(mc, tiny_model[1], second, expect_cached=36)
    stats = cache.stats()
    assert (stats.hits, stats.hit_tokens, stats.cold.blocks) == (1, 36, 0)
    assert stats.hot.blocks == 9 and stats.hot.tokens == 36
    cache.close(spill=False)


def test_partial_prefix_rules(tiny_model, tmp_path: Path) -> None:
    """A prompt sharing 21 tokens (5 blocks and the first token of the sixth): full attention
    reuses all 21; a sliding window needs its window's blocks, a recurrent layer a snapshot
    at the prefix end: both miss."""
    arch, model = tiny_model
    cache = _cache(tmp_path)
    mc, second = _turn(tiny_model, cache)
    diverging = [*second[:21], second[21] % 127 + 1, *_prompt(8, seed=3)]
    _check(mc, model, diverging, expect_cached={"llama": 21}.get(arch, 0))
    cache.close(spill=False)


def _short_cache(tmp_path: Path, **kw) -> PrefixCache:
    settings = CacheSettings(block_size=64, hot_budget_bytes=64 * 1024**2, **kw)
    return PrefixCache(settings, tmp_path / "cold", cold_cap_bytes=256 * 1024**2)


def test_prompts_shorter_than_a_block_share_their_start(tiny_model, tmp_path: Path) -> None:
    """Like chat prompts behind one system head: no whole block, yet the shared start is
    reused (full attention only), output unchanged, and nothing partial reaches the disk."""
    arch, model = tiny_model
    cache = _short_cache(tmp_path)
    mc = cache.for_model(f"fp-{arch}", model, model_name=arch)
    head = _prompt(12, seed=5)
    _, kv, tokens = greedy(model, head + _prompt(9, seed=6), 5)
    mc.store(tokens, kv)
    granular = arch == "llama"
    assert cache.stats().hot.blocks == int(granular)
    _check(mc, model, head + _prompt(7, seed=7), expect_cached=12 if granular else 0)
    _check(mc, model, tokens[:18], expect_cached=17 if granular else 0)  # one left to prefill
    cache.close()  # spills the hot tier: a partial block is dropped, not written
    assert cache.stats().cold.blocks == 0 and not list((tmp_path / "cold").rglob("*.safetensors"))


def _one_stored(tmp_path: Path, seed: int):
    """A llama-layout cache with block size 64 holding one short sequence (a partial block)."""
    from tests.mlx.cache.conftest import build_model

    model = build_model("llama")
    cache = _short_cache(tmp_path)
    mc = cache.for_model("fp", model)
    _, kv, tokens = greedy(model, _prompt(10, seed=seed), 3)
    mc.store(tokens, kv)
    return model, cache, mc, kv, tokens


def test_longer_partial_replaces_its_prefix_and_the_switch_turns_it_off(tmp_path: Path) -> None:
    model, cache, mc, kv, first = _one_stored(tmp_path, seed=8)
    _, kv, second = greedy(model, first + _prompt(4, seed=9), 3)
    mc.store(second, kv)
    assert cache.stats().hot.blocks == 1 and cache.stats().hot.tokens == len(second)
    mc.store(first, kv)  # covered by the stored partial: nothing new
    assert cache.stats().hot.blocks == 1
    _check(mc, model, [*second, 3], expect_cached=len(second))
    cache.close(spill=False)

    off = _short_cache(tmp_path / "off", partial_blocks=False)
    mc = off.for_model("fp", model)
    mc.store(second, kv)
    assert off.stats().hot.blocks == 0 and mc.fetch([*second, 3]) == (None, 0)
    off.close(spill=False)


def test_auto_cache_settings_follow_the_device(tmp_path: Path, monkeypatch) -> None:
    """partial_blocks = auto: on the CPU a sub-block tail is kept and reused; on an NVIDIA
    GPU it is not (recomputing it in the batched prefill costs less than copying it back)."""
    model, cache, mc, kv, first = _one_stored(tmp_path, seed=12)  # auto, on the CPU
    assert cache.stats().hot.blocks == 1
    assert mc.defer_stores is False  # and stores run at once (cache.store_while_busy)
    _check(mc, model, [*first, 3], expect_cached=len(first))
    cache.close(spill=False)

    import omlx.cache.model_cache as model_cache

    monkeypatch.setattr(model_cache, "on_cuda", lambda: True)
    gpu = _short_cache(tmp_path / "gpu")
    mc = gpu.for_model("fp", model)
    assert mc.defer_stores is True
    mc.store(first, kv)
    assert gpu.stats().hot.blocks == 0 and mc.fetch([*first, 3]) == (None, 0)
    gpu.close(spill=False)


def test_evicted_partial_is_a_clean_miss(tmp_path: Path) -> None:
    _, cache, mc, _, tokens = _one_stored(tmp_path, seed=10)
    cache.clear(tier="hot")
    assert mc.fetch([*tokens, 3]) == (None, 0)
    assert cache.stats().cold.blocks == 0
    cache.close(spill=False)


def test_cold_hit_and_restart(tiny_model, tmp_path: Path) -> None:
    arch, model = tiny_model
    cache = _cache(tmp_path, hot_budget_bytes=0)  # every block goes straight to disk
    mc, second = _turn(tiny_model, cache)
    assert cache.stats().hot.blocks == 0 and cache.stats().cold.blocks == 9
    _check(mc, model, second, expect_cached=36)
    cache.close()

    restarted = _cache(tmp_path)
    assert restarted.stats().cold.blocks == 9
    mc2 = restarted.for_model(f"fp-{arch}", model, model_name=arch)
    _check(mc2, model, second, expect_cached=36)
    assert restarted.stats().hot.blocks == 9  # promoted on the hit
    other = restarted.for_model("another-fingerprint", model)
    assert other.fetch(second) == (None, 0)
    restarted.close(spill=False)


def test_disabled_cache_is_a_no_op(tmp_path: Path) -> None:
    from tests.mlx.cache.conftest import build_model

    model = build_model("llama")
    cache = PrefixCache(CacheSettings(enabled=False, block_size=B), tmp_path / "cold")
    mc = cache.for_model("fp", model)
    _, kv, tokens = greedy(model, _prompt(12, seed=1), 4)
    mc.store(tokens, kv)
    assert mc.fetch([*tokens, 1]) == (None, 0)
    assert not (tmp_path / "cold").exists()
    assert cache.stats().enabled is False


@pytest.mark.parametrize("num_prompt", [4, 5, 8, 9])
def test_fetch_leaves_a_token_to_prefill(tmp_path: Path, num_prompt: int) -> None:
    from tests.mlx.cache.conftest import build_model

    model = build_model("llama")
    cache = _cache(tmp_path)
    mc = cache.for_model("fp", model)
    _, kv, tokens = greedy(model, _prompt(12, seed=4), 4)
    mc.store(tokens, kv)
    _, num_cached = mc.fetch(tokens[:num_prompt])
    assert num_cached == num_prompt - 1  # whole blocks, then the shared start of the next
    cache.close(spill=False)
