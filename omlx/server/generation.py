"""Running one generation from a route: admission, streaming, collection, disconnects.

Dialect-free: OpenAI and Anthropic routes share it and only render events differently.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from litestar import Request

from omlx.engine.api import (
    Done,
    Failed,
    GenerationEvent,
    GenerationRequest,
    ModelPool,
    Started,
    Token,
    TokenLogprob,
    ToolCall,
)
from omlx.server.event_stream import (
    ClientDisconnected,
    EventStream,
    KeepAlive,
    watch_disconnect,
)
from omlx.server.request_log import current_record
from omlx.server.sse import keepalive_frame, keepalive_interval, sse_response
from omlx.settings import Settings

# How long a streaming route waits for the engine's first event (Started: the request
# was validated, tokenized and admitted; prefill, with its keep-alives, comes after)
# before it starts the SSE response anyway. Errors before then keep their HTTP status
# (a long prompt past the window is a 400, not a 200 stream holding an error event);
# only a request still queued behind busy slots after this long starts streaming.
ADMISSION_WAIT_S = 60.0


def pool_of(request: Request[Any, Any, Any]) -> ModelPool:
    return request.app.state["pool"]


def settings_of(request: Request[Any, Any, Any]) -> Settings:
    return request.app.state["settings"]


def note_event(record_from: GenerationEvent) -> None:
    """Token counts and finish reason for the request's log line."""
    record = current_record()
    if isinstance(record_from, Started):
        record.prompt_tokens = record_from.prompt_tokens
        record.cached_tokens = record_from.cached_tokens
        record.max_tokens = record_from.max_tokens
    elif isinstance(record_from, Token):
        # Counted as they stream: a client that goes away never sees the Done event.
        record.completion_tokens += len(record_from.token_ids)
    elif isinstance(record_from, Done):
        record.prompt_tokens = record_from.prompt_tokens
        record.completion_tokens = record_from.completion_tokens
        record.cached_tokens = record_from.cached_tokens
        record.finish = str(record_from.finish_reason)
        record.served_by = record_from.served_by
    elif isinstance(record_from, Failed):
        is_gone = isinstance(record_from.error, ClientDisconnected)
        record.finish = "disconnected" if is_gone else "error"


def begin(request: Request[Any, Any, Any], gen: GenerationRequest) -> EventStream:
    record = current_record()
    record.request_id = gen.request_id
    record.model = gen.model
    record.requested_max_tokens = gen.max_tokens
    return EventStream(pool_of(request), gen)


async def admit(stream: EventStream) -> None:
    """Wait for the first event; raise the request's error if it failed before it.

    While the model is still to be loaded the wait has no limit: the request is
    validated only once the model (its tokenizer, its context) is there.
    """
    first = await stream.next(ADMISSION_WAIT_S if stream.model_is_loaded() else None)
    if first is None:
        return
    if isinstance(first, Failed):
        stream.close()
        raise first.error
    stream.push_back(first)


@dataclass(slots=True)
class Collected:
    """A whole non-streamed generation."""

    text: str = ""
    reasoning: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    logprobs: list[TokenLogprob] = field(default_factory=list)
    done: Done | None = None


async def collect(request: Request[Any, Any, Any], stream: EventStream) -> Collected:
    """Run to completion; a client that disconnects cancels the request in the engine."""
    watcher = asyncio.get_running_loop().create_task(watch_disconnect(request.receive, stream))
    try:
        events = await stream.collect()
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
        stream.close()
    out = Collected()
    for event in events:
        note_event(event)
        if isinstance(event, Failed):
            raise event.error
        if isinstance(event, Token):
            out.text += event.text
            out.reasoning += event.reasoning
            out.tool_calls.extend(event.tool_calls)
            out.logprobs.extend(event.logprobs or [])
        elif isinstance(event, Done):
            out.done = event
    return out


FrameRenderer = Callable[[GenerationEvent], list[bytes]]


def stream_response(
    stream: EventStream,
    settings: Settings,
    render: FrameRenderer,
    *,
    empty_chunk: bytes | None,
    error_frame: Callable[[BaseException], bytes],
) -> Any:
    """An SSE response: keep-alive frames while idle, `render(event)` frames per event,
    an in-stream error frame on failure; disconnect or end closes the engine request."""
    mode = settings.server.keepalive_mode
    frames = event_frames(
        stream,
        render,
        interval=keepalive_interval(mode, settings.server.keepalive_interval_s),
        tick=keepalive_frame(mode, empty_chunk),
        error_frame=error_frame,
    )
    return sse_response(frames, on_close=stream.close)


async def event_frames(
    stream: EventStream,
    render: FrameRenderer,
    *,
    interval: float | None,
    tick: bytes | Callable[[], bytes] | None,
    error_frame: Callable[[BaseException], bytes],
    opening: Callable[[], Awaitable[list[bytes]]] | None = None,
) -> AsyncGenerator[bytes, None]:
    """The frame loop of every streamed route (OpenAI, Anthropic, Responses): `opening()`
    frames first, `tick` on each keep-alive, `render(event)` per event, an in-stream
    error frame when the engine or a renderer fails, the request's log line filled in."""
    try:
        if opening is not None:
            for chunk in await opening():
                yield chunk
        async for item in stream.events(interval):
            if item is KeepAlive.TICK:
                if tick is not None:
                    yield tick() if callable(tick) else tick
                continue
            note_event(item)
            if isinstance(item, Failed):
                yield error_frame(item.error)
                return
            for chunk in render(item):
                yield chunk
    except Exception as e:  # a failure while rendering: tell the client, then close
        yield error_frame(e)
    finally:
        if not stream.is_finished:
            current_record().finish = "disconnected"
        stream.close()
