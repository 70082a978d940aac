"""One request's engine events, read without blocking, with keep-alive ticks and cancel.

The pool hands events over through `generate_into`, in the engine's once-a-step hand-off
on the event loop, straight into this stream's queue: the response's task is the only
one woken per token (a task pumping the pool's iterator cost another wake-up a token, on
the thread whose GIL the engine needs). Waiting for the next event with a timeout never
cancels the engine's request halfway through.
"""

from __future__ import annotations

import asyncio
import enum
import time
from collections.abc import AsyncIterator
from typing import Any

from omlx.engine.api import (
    Done,
    Failed,
    GenerationEvent,
    GenerationRequest,
    ModelPool,
    Token,
)


class KeepAlive(enum.Enum):
    """Yielded by `EventStream.events` when nothing was sent for a keep-alive interval."""

    TICK = "tick"


class ClientDisconnected(Exception):
    """The client went away before its request finished."""


class EngineStreamEnded(RuntimeError):
    """The engine's iterator stopped without a Done or Failed event."""


Item = GenerationEvent | KeepAlive


class _IdleTimer:
    """Queues a KeepAlive after each `interval_s` without a touch().

    One timer per interval, not per event: waiting on each event with a timeout
    (asyncio.wait_for) cost a task per token, on the thread that also runs the engine's
    Python whenever it holds the GIL.
    """

    def __init__(self, interval_s: float, queue: asyncio.Queue[Item]) -> None:
        self._interval_s = interval_s
        self._queue = queue
        self._loop = asyncio.get_running_loop()
        self._last = time.monotonic()
        self._handle = self._loop.call_later(interval_s, self._fire)

    def touch(self) -> None:
        self._last = time.monotonic()

    def _fire(self) -> None:
        idle_s = time.monotonic() - self._last
        if idle_s < self._interval_s:  # touched since it was armed: wait out the rest
            self._handle = self._loop.call_later(self._interval_s - idle_s, self._fire)
            return
        self._queue.put_nowait(KeepAlive.TICK)
        self.touch()
        self._handle = self._loop.call_later(self._interval_s, self._fire)

    def cancel(self) -> None:
        self._handle.cancel()


class EventStream:
    """Runs `pool.generate_into(request)` in a task; `close()` cancels it in the engine."""

    def __init__(self, pool: ModelPool, request: GenerationRequest) -> None:
        self._pool = pool
        self.request = request
        self.request_id = request.request_id
        self._queue: asyncio.Queue[Item] = asyncio.Queue()
        self._pending: list[Item] = []
        self.is_finished = False
        self._has_ended = False  # the pool delivered Done or Failed
        self._is_closed = False
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        try:
            await self._pool.generate_into(self.request, self._deliver)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # errors raised before/between events reach the reader
            self._deliver(Failed(self.request_id, e))
            return
        self._deliver(
            Failed(self.request_id, EngineStreamEnded("engine stream ended without a result"))
        )

    def _deliver(self, event: GenerationEvent) -> None:
        if self._has_ended:
            return  # one final event: nothing is read after it
        self._has_ended = isinstance(event, Done | Failed)
        self._queue.put_nowait(event)

    async def next(self, timeout_s: float | None = None) -> Item | None:
        """The next event, or None if none arrived within `timeout_s`. Tokens already
        queued behind a Token come merged into it (see `_merge_queued`)."""
        if self._pending:
            event = self._pending.pop(0)
        elif not self._queue.empty():  # fast path: wait_for costs a task per call
            event = self._queue.get_nowait()
        elif timeout_s is None:
            event = await self._queue.get()
        else:
            try:
                event = await asyncio.wait_for(self._queue.get(), timeout_s)
            except TimeoutError:
                return None
        # Only with nothing held back: held events come before anything still queued.
        if isinstance(event, Token) and not self._pending and not self._queue.empty():
            event = self._merge_queued(event)
        if isinstance(event, Done | Failed):
            self.is_finished = True
        return event

    def _merge_queued(self, token: Token) -> Token:
        """`token` with the Tokens queued behind it, up to the first one that cannot join.

        When the event loop falls behind the engine (many streams), a stream's tokens of
        several steps wait here; rendering them as one event costs the loop (and the GIL
        the engine thread needs) one frame instead of one per token.
        """
        merged = token
        while not self._queue.empty():
            event = self._queue.get_nowait()
            joined = merge_tokens(merged, event) if isinstance(event, Token) else None
            if joined is None:
                self._pending.insert(0, event)
                break
            merged = joined
        return merged

    def model_is_loaded(self) -> bool:
        return any(m.id == self.request.model and m.loaded for m in self._pool.list_models())

    def push_back(self, event: Item) -> None:
        self._pending.insert(0, event)
        if isinstance(event, Done | Failed):
            self.is_finished = False

    async def events(self, keepalive_s: float | None) -> AsyncIterator[Item]:
        """Events until Done/Failed; a KeepAlive at once and after each idle interval.

        Started/Progress do not reset the keep-alive clock: they produce no output.
        """
        if keepalive_s is not None:
            yield KeepAlive.TICK
        timer = None if keepalive_s is None else _IdleTimer(keepalive_s, self._queue)
        try:
            while True:
                event = await self.next()
                assert event is not None
                if isinstance(event, Token) and timer is not None:
                    timer.touch()
                yield event
                if self.is_finished:
                    return
        finally:
            if timer is not None:
                timer.cancel()

    async def collect(self) -> list[GenerationEvent]:
        """Every event up to and including Done/Failed (non-streaming requests)."""
        out: list[GenerationEvent] = []
        while not self.is_finished:
            event = await self.next()
            assert event is not None
            out.append(event)
        return out

    def close(self) -> None:
        """Stop the request: cancel it in the engine unless it already finished."""
        if self._is_closed:
            return
        self._is_closed = True
        if not self._task.done():
            self._task.cancel()
        if not self.is_finished:
            self._pool.cancel(self.request_id)
            self._queue.put_nowait(
                Failed(self.request_id, ClientDisconnected("client disconnected"))
            )


def merge_tokens(first: Token, second: Token) -> Token | None:
    """One Token for two consecutive ones; None where one event would say something else:
    around a tool call, or mixing reasoning and content (renderers put a Token's reasoning
    first and count all its tokens as reasoning)."""
    if first.tool_calls or second.tool_calls:
        return None
    if (first.reasoning or second.reasoning) and (first.text or second.text):
        return None
    logprobs = None
    if first.logprobs is not None or second.logprobs is not None:
        logprobs = [*(first.logprobs or ()), *(second.logprobs or ())]
    return Token(
        first.request_id,
        first.text + second.text,
        [*first.token_ids, *second.token_ids],
        first.reasoning + second.reasoning,
        logprobs=logprobs,
    )


async def watch_disconnect(receive: Any, stream: EventStream) -> None:
    """Close `stream` when the client disconnects (for responses that are not streamed).

    Call after the request body was read: the next ASGI message is the disconnect.
    """
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            stream.close()
            return
