"""Helpers for engine tests: a pool over a tiny model and a request runner."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omlx.engine.api import (
    ChatMessage,
    Done,
    Failed,
    GenerationEvent,
    GenerationRequest,
    Progress,
    RequestId,
    SamplingParams,
    Started,
    Token,
)
from omlx.pool.pool import LocalModelPool
from omlx.settings import EngineSettings, Settings

_ids = itertools.count()


@dataclass
class Result:
    events: list[GenerationEvent] = field(default_factory=list)

    @property
    def token_ids(self) -> list[int]:
        return [t for e in self.events if isinstance(e, Token) for t in e.token_ids]

    @property
    def text(self) -> str:
        return "".join(e.text for e in self.events if isinstance(e, Token))

    @property
    def done(self) -> Done:
        last = self.events[-1]
        assert isinstance(last, Done), f"ended with {last!r}"
        return last

    @property
    def started(self) -> Started:
        return next(e for e in self.events if isinstance(e, Started))

    @property
    def progress(self) -> list[Progress]:
        return [e for e in self.events if isinstance(e, Progress)]


def request(
    text: str = "hello", *, model: str = "tiny", max_tokens: int | None = 16, **kw: Any
) -> GenerationRequest:
    sampling = kw.pop("sampling", SamplingParams(temperature=0.0))
    if not {"prompt_token_ids", "prompt", "messages"} & kw.keys():
        kw["messages"] = [ChatMessage("user", text)]
    return GenerationRequest(
        request_id=RequestId(f"req-{next(_ids)}"),
        model=model,
        max_tokens=max_tokens,
        sampling=sampling,
        **kw,
    )


async def collect(pool: LocalModelPool, req: GenerationRequest) -> Result:
    result = Result()
    async for event in pool.generate(req):
        result.events.append(event)
        if isinstance(event, Failed):
            raise event.error
    return result


def make_pool(model_dir: Path, **engine: Any) -> LocalModelPool:
    settings = Settings(engine=EngineSettings(**engine))
    return LocalModelPool(settings, models={"tiny": model_dir})


def run_with_pool(
    model_dir: Path, body: Callable[[LocalModelPool], Coroutine[Any, Any, Any]], **engine: Any
) -> Any:
    async def main() -> Any:
        pool = make_pool(model_dir, **engine)
        try:
            return await asyncio.wait_for(body(pool), timeout=120)
        finally:
            await pool.close(grace_s=0)

    return asyncio.run(main())
