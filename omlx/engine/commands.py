"""Messages between the asyncio side and an engine thread (pure Python)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from omlx.engine.api import GenerationEvent, RequestId, SamplingParams
from omlx.engine.text.templating import PreparedPrompt


@dataclass(frozen=True, slots=True)
class EventSink:
    """Where one request's events go: an asyncio.Queue owned by `loop`."""

    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue[GenerationEvent]


@dataclass(frozen=True, slots=True)
class Submission:
    request_id: RequestId
    prompt: PreparedPrompt
    sampling: SamplingParams
    stop: list[str]
    sink: EventSink
    submitted_at: float = field(default_factory=time.monotonic)
    thinking_budget_tokens: int | None = None
    # The compiled output grammar (constraints.CompiledGrammar), or None for free text.
    grammar: Any = None
    received_at: float | None = None  # before templating (step trace: prepare time)


@dataclass(frozen=True, slots=True)
class Submit:
    submission: Submission


@dataclass(frozen=True, slots=True)
class Cancel:
    request_id: RequestId


@dataclass(frozen=True, slots=True)
class Shutdown:
    grace_s: float


@dataclass(frozen=True, slots=True)
class Call:
    """Run fn on the engine thread (it may touch MLX); the result lands in future."""

    fn: Callable[[], Any]
    future: concurrent.futures.Future[Any]


Command = Submit | Cancel | Shutdown | Call


class AltPath(Protocol):
    """A per-model alternative generator (e.g. DFlash) for single requests.

    Runs on the engine thread, one cycle per engine step, interleaved with the batch.
    """

    name: str  # reported as Done.served_by

    def wants(
        self, prompt: PreparedPrompt, sampling: SamplingParams, *, num_running: int
    ) -> bool: ...

    def open(
        self,
        model: Any,
        prompt_ids: list[int],
        sampling: SamplingParams,
        max_tokens: int,
        grammar: Any = None,
    ) -> Iterator[list[int]]:
        """Yields the tokens each cycle commits; the engine checks EOS/stop/max_tokens.
        A constrained request brings its grammar (a RowMatcher); every token must fit it."""
        ...

    # Optional: `prepare(model)`, called once on the engine thread after the model loads
    # and before any request, to load and warm what `open` would otherwise do on the
    # first request (the engine logs and ignores its failure; `open` then tries again).
