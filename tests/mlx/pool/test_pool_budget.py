"""LocalModelPool under a memory budget: eviction order, pins, TTL, single loads, freed memory."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from omlx.engine.api import EmbeddingRequest, GenerationRequest, RequestId, SamplingParams
from omlx.errors import InvalidRequest, ModelTooLarge, Overloaded
from omlx.pool.pool import LocalModelPool
from omlx.settings import ModelSettings, Settings

pytestmark = pytest.mark.timeout(120)


def settings(budget: str = "0.75", ttl_s: float = 0.0, pinned: tuple[str, ...] = ()) -> Settings:
    return Settings(models=ModelSettings(memory_budget=budget, ttl_s=ttl_s, pinned=list(pinned)))


def loaded(pool: LocalModelPool) -> list[str]:
    return sorted(m.id for m in pool.list_models() if m.loaded)


async def embed(pool: LocalModelPool, model: str) -> list[list[float]]:
    return (await pool.embed(EmbeddingRequest(model=model, inputs=["hello world"]))).embeddings


def test_budget_fitting_one_of_two_evicts_lru(tiny_bert_dirs: list[Path]) -> None:
    a, b, c = tiny_bert_dirs

    async def main() -> None:
        # Each tiny BERT is ~8 MB of weights: 20 MB holds two, never three.
        pool = LocalModelPool(settings("20MB"), models={"a": a, "b": b, "c": c})
        try:
            await embed(pool, "a")
            await embed(pool, "b")
            await embed(pool, "a")  # b is now the least recently used
            assert loaded(pool) == ["a", "b"]
            await embed(pool, "c")
            assert loaded(pool) == ["a", "c"]
            await embed(pool, "b")
            assert loaded(pool) == ["b", "c"]  # a was least recently used this time
            status = {m.id: m for m in pool.status().data}
            assert status["a"].state == "available"
            assert status["b"].state == "loaded" and status["b"].memory_bytes > 7_000_000
            assert pool.status().used_bytes <= pool.status().budget_bytes
        finally:
            await pool.close(grace_s=0)

    asyncio.run(main())


def test_pinned_model_survives_pressure(tiny_bert_dirs: list[Path]) -> None:
    a, b, c = tiny_bert_dirs

    async def main() -> None:
        pool = LocalModelPool(settings("20MB", pinned=("a",)), models={"a": a, "b": b, "c": c})
        try:
            await embed(pool, "a")
            await embed(pool, "b")
            await embed(pool, "c")  # a is the LRU but pinned: b goes
            assert loaded(pool) == ["a", "c"]
            await pool.pin("c")
            with pytest.raises(Overloaded, match=r"'b' needs about .* pinned"):
                await embed(pool, "b")
            assert loaded(pool) == ["a", "c"]
            await pool.unpin("a")
            await embed(pool, "b")
            assert loaded(pool) == ["b", "c"]
        finally:
            await pool.close(grace_s=0)

    asyncio.run(main())


def test_model_larger_than_budget_names_sizes(tiny_bert_dirs: list[Path]) -> None:
    async def main() -> None:
        pool = LocalModelPool(settings("1MB"), models={"a": tiny_bert_dirs[0]})
        try:
            with pytest.raises(
                ModelTooLarge, match=r"needs about \d.* MB but the memory budget is 1.0 MB"
            ):
                await embed(pool, "a")
            assert loaded(pool) == []
        finally:
            await pool.close(grace_s=0)

    asyncio.run(main())


def test_ttl_unloads_idle_model(tiny_bert_dirs: list[Path]) -> None:
    async def main() -> None:
        pool = LocalModelPool(settings(ttl_s=0.4), models={"a": tiny_bert_dirs[0]})
        try:
            await embed(pool, "a")
            assert loaded(pool) == ["a"]
            left = pool.status().data[0].ttl_left_s
            assert left is not None and 0 < left <= 0.4
            for _ in range(200):  # polls: the sweeper checks every 0.1 s here
                if not loaded(pool):
                    break
                await asyncio.sleep(0.05)
            assert loaded(pool) == []
            await embed(pool, "a")  # loads again on the next request
            assert loaded(pool) == ["a"]
        finally:
            await pool.close(grace_s=0)

    asyncio.run(main())


def test_pinned_model_ignores_ttl(tiny_bert_dirs: list[Path]) -> None:
    async def main() -> None:
        pool = LocalModelPool(settings(ttl_s=0.2, pinned=("a",)), models={"a": tiny_bert_dirs[0]})
        try:
            await embed(pool, "a")
            await asyncio.sleep(0.8)
            assert loaded(pool) == ["a"]
        finally:
            await pool.close(grace_s=0)

    asyncio.run(main())


def test_concurrent_first_requests_load_once(
    tiny_bert_dirs: list[Path], tiny_qwen3_dir: Path
) -> None:
    async def main() -> None:
        pool = LocalModelPool(settings(), models={"a": tiny_bert_dirs[0], "q": tiny_qwen3_dir})
        try:
            results = await asyncio.gather(*(embed(pool, "a") for _ in range(6)))
            assert pool.num_loads == 1
            assert all(r == results[0] for r in results)
            counts = await asyncio.gather(
                *(
                    pool.count_tokens(
                        GenerationRequest(
                            RequestId(f"r{i}"), "q", prompt="hi", sampling=SamplingParams()
                        )
                    )
                    for i in range(4)
                )
            )
            assert pool.num_loads == 2 and len(set(counts)) == 1
            assert {m.id: m.type for m in pool.list_models()} == {"a": "embedding", "q": "llm"}
        finally:
            await pool.close(grace_s=0)

    asyncio.run(main())


def test_wrong_model_type_is_invalid_request(
    tiny_bert_dirs: list[Path], tiny_qwen3_dir: Path
) -> None:
    async def main() -> None:
        pool = LocalModelPool(settings(), models={"a": tiny_bert_dirs[0], "q": tiny_qwen3_dir})
        try:
            with pytest.raises(InvalidRequest, match="embedding model; it cannot generate text"):
                await pool.count_tokens(GenerationRequest(RequestId("r"), "a", prompt="hi"))
            with pytest.raises(InvalidRequest, match="llm model; it cannot embed"):
                await embed(pool, "q")
        finally:
            await pool.close(grace_s=0)

    asyncio.run(main())


def test_unload_frees_mlx_memory(minilm_path: Path, tiny_qwen3_dir: Path) -> None:
    import mlx.core as mx

    async def main() -> tuple[int, int, int]:
        pool = LocalModelPool(settings(), models={"minilm": minilm_path})
        try:
            before = mx.get_active_memory()
            await embed(pool, "minilm")
            during = mx.get_active_memory()
            assert await pool.unload("minilm")
            after = mx.get_active_memory()
            return before, during, after
        finally:
            await pool.close(grace_s=0)

    before, during, after = asyncio.run(main())
    weights = 90_000_000  # all-MiniLM-L6-v2 in float32
    assert during - before > 0.9 * weights
    assert during - after > 0.9 * weights, (before, during, after)


def test_unloading_a_text_model_frees_mlx_memory(smollm2_dir: Path) -> None:
    import mlx.core as mx

    async def main() -> tuple[int, int, int]:
        pool = LocalModelPool(settings(), models={"smol": smollm2_dir})
        try:
            before = mx.get_active_memory()
            request = GenerationRequest(RequestId("r"), "smol", prompt="hi", max_tokens=2)
            async for _ in pool.generate(request):
                pass
            during = mx.get_active_memory()
            row = pool.status().data[0]
            assert row.state == "loaded" and row.memory_bytes > 500e6
            assert row.estimated_bytes and row.estimated_bytes > 500e6
            assert await pool.unload("smol")
            return before, during, mx.get_active_memory()
        finally:
            await pool.close(grace_s=0)

    before, during, after = asyncio.run(main())
    assert during - before > 500e6  # SmolLM2-135M in float32: ~540 MB of weights
    assert during - after > 500e6, (before, during, after)
