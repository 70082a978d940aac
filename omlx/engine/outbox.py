"""Batched event delivery from the engine thread to asyncio queues (pure Python)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import defaultdict
from typing import Any

from omlx.engine.api import GenerationEvent
from omlx.engine.commands import EventSink


class Outbox:
    """Collects one step's events; flush() hands them over in one call per event loop."""

    __slots__ = ("_items", "trace")

    def __init__(self) -> None:
        self._items: list[tuple[EventSink, GenerationEvent]] = []
        self.trace: Any = None  # a StepTrace: how late the event loop runs each hand-off

    def put(self, sink: EventSink, event: GenerationEvent) -> None:
        self._items.append((sink, event))

    def flush(self) -> None:
        if not self._items:
            return
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[EventSink, GenerationEvent]]] = (
            defaultdict(list)
        )
        for sink, event in self._items:
            by_loop[sink.loop].append((sink, event))
        self._items = []
        for loop, items in by_loop.items():
            # A closed loop raises RuntimeError: nobody is listening any more.
            with contextlib.suppress(RuntimeError):
                if self.trace is None:
                    loop.call_soon_threadsafe(_deliver, items)
                else:
                    loop.call_soon_threadsafe(_deliver_traced, items, self.trace, time.monotonic())


def _deliver(items: list[tuple[EventSink, GenerationEvent]]) -> None:
    for sink, event in items:
        sink.queue.put_nowait(event)


def _deliver_traced(items: list[tuple[EventSink, GenerationEvent]], trace: Any, at: float) -> None:
    trace.delivered(time.monotonic() - at)
    _deliver(items)
