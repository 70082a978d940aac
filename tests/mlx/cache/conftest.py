"""Tiny in-memory models of real mlx-lm architectures and a BatchGenerator greedy driver."""

from __future__ import annotations

from typing import Any

import pytest

from tests.fixtures.tiny_models import build_tiny_in_memory

VOCAB = 128  # prompts in these tests are ids below this


def build_model(arch: str, seed: int = 0) -> Any:
    """The shared tiny `arch` model (tests/fixtures/tiny_models.py) with a small vocabulary."""
    return build_tiny_in_memory(arch, seed, vocab_size=VOCAB)


@pytest.fixture(scope="session", params=["llama", "gemma3", "hybrid"])
def tiny_model(request: pytest.FixtureRequest) -> tuple[str, Any]:
    return request.param, build_model(request.param)


def greedy(
    model: Any,
    prompt: list[int],
    max_tokens: int,
    cache: list | None = None,
    num_cached: int = 0,
) -> tuple[list[int], list, list[int]]:
    """Greedy-generate through BatchGenerator as the engine does.

    Returns (generated ids, the sequence's extracted cache, the tokens its KV holds).
    """
    from mlx_lm.generate import BatchGenerator

    gen = BatchGenerator(model, max_tokens=max_tokens, stop_tokens=[], prefill_step_size=64)
    (uid,) = gen.insert(
        [prompt[num_cached:]],
        max_tokens=[max_tokens],
        caches=[cache] if cache is not None else None,
        all_tokens=[prompt[:num_cached]] if cache is not None else None,
    )
    out: list[int] = []
    while True:
        for r in gen.next_generated():
            assert r.uid == uid
            out.append(r.token)
            if r.finish_reason is not None:
                gen.close()
                return out, r.prompt_cache, r.all_tokens
