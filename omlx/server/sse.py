"""Server-sent events: framing, keep-alive frames and a streaming response that cleans up.

Pure framing plus one Litestar response builder; dialects build their own payloads.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from typing import Any

import msgspec
from litestar.background_tasks import BackgroundTask
from litestar.response import Stream

from omlx.settings import KeepAliveMode

COMMENT_KEEPALIVE = b": keep-alive\n\n"
DONE = b"data: [DONE]\n\n"

_encoder = msgspec.json.Encoder()

SSE_HEADERS = {
    "Cache-Control": "no-cache",
    # Reverse proxies (nginx) must not buffer a token stream.
    "X-Accel-Buffering": "no",
}


def frame(payload: Any, event: str | None = None) -> bytes:
    """One SSE event; `payload` is JSON-encoded unless it is already bytes."""
    data = payload if isinstance(payload, bytes) else _encoder.encode(payload)
    head = b"event: " + event.encode() + b"\n" if event else b""
    return head + b"data: " + data + b"\n\n"


def keepalive_frame(mode: KeepAliveMode, empty_chunk: bytes | None) -> bytes | None:
    """The frame sent while the first token is pending, or None when keep-alive is off.

    `empty_chunk` is the dialect's protocol-aware no-op event (an OpenAI chunk with an
    empty delta, an Anthropic ping), used in "chunk" mode.
    """
    if mode == "off":
        return None
    if mode == "chunk" and empty_chunk is not None:
        return empty_chunk
    return COMMENT_KEEPALIVE


def keepalive_interval(mode: KeepAliveMode, interval_s: float) -> float | None:
    return None if mode == "off" else interval_s


def sse_response(
    frames: AsyncGenerator[bytes, None], on_close: Callable[[], None] | None = None
) -> Stream:
    """Stream `frames`; when the stream ends or the client goes away, close the
    generator (running its `finally`) and call `on_close` (e.g. cancel the request)."""

    async def cleanup() -> None:
        try:
            await frames.aclose()
        finally:
            if on_close is not None:
                on_close()

    return Stream(
        frames,
        media_type="text/event-stream",
        headers=SSE_HEADERS,
        background=BackgroundTask(cleanup),
    )
