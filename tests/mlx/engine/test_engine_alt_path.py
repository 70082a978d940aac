"""The alternative-path seam (DFlash): a per-model generator that serves single requests."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from omlx.engine.api import FinishReason
from omlx.pool.pool import LocalModelPool
from omlx.settings import Settings
from tests.mlx.engine.engine_helpers import collect, request

pytestmark = pytest.mark.timeout(120)


class ScriptedPath:
    """Commits tokens 3 per cycle from a fixed script; wants requests when nothing else runs."""

    name = "scripted"

    def __init__(self) -> None:
        self.opened = 0
        self.prepared: list = []
        self.prepared_before_open: list | None = None

    def wants(self, prompt, sampling, *, num_running):
        return num_running == 0 and sampling.is_greedy

    def open(self, model, prompt_ids, sampling, max_tokens, grammar=None):
        self.opened += 1
        self.prepared_before_open = list(self.prepared)  # a copy: what open saw
        script = itertools.cycle([1000, 2000, 3000, 4000])

        def cycles():
            while True:
                yield [next(script) for _ in range(3)]

        return cycles()


class PreparedPath(ScriptedPath):
    """Records the model `prepare` got; fails it when asked to."""

    def __init__(self, fail: bool = False) -> None:
        super().__init__()
        self.fail = fail

    def prepare(self, model):
        self.prepared.append(type(model).__name__)
        if self.fail:
            raise RuntimeError("no draft here")


@pytest.mark.parametrize("fail", [False, True], ids=["prepared", "prepare-failed"])
def test_the_engine_prepares_the_path_once_at_load_and_serves_if_that_fails(tiny_dir, fail):
    path = PreparedPath(fail=fail)

    async def main():
        pool = LocalModelPool(Settings(), models={"tiny": tiny_dir}, alt_paths={"tiny": path})
        try:
            first = await collect(pool, request(max_tokens=4))
            second = await collect(pool, request(max_tokens=4))
            return first, second
        finally:
            await pool.close(grace_s=0)

    first, second = asyncio.run(main())
    assert path.prepared == ["Model"]  # once, with the loaded model, before any request
    assert path.prepared_before_open == ["Model"]
    assert path.opened == 2
    assert first.done.served_by == second.done.served_by == "scripted"
    assert first.token_ids == [1000, 2000, 3000, 4000]


def test_single_requests_go_to_the_alternative_path(tiny_dir):
    path = ScriptedPath()

    async def main():
        pool = LocalModelPool(Settings(), models={"tiny": tiny_dir}, alt_paths={"tiny": path})
        try:
            return await collect(pool, request(max_tokens=7))
        finally:
            await pool.close(grace_s=0)

    result = asyncio.run(main())
    assert path.opened == 1
    assert result.done.served_by == "scripted"
    assert result.done.finish_reason == FinishReason.LENGTH
    assert result.token_ids == [1000, 2000, 3000, 4000, 1000, 2000, 3000]
    assert result.done.completion_tokens == 7
