"""POST /v1/messages and /v1/messages/count_tokens (Anthropic Messages API)."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any

from litestar import Request, Response, post

from omlx.engine.api import Done, Failed, GenerationEvent, Started
from omlx.schemas import anthropic as an
from omlx.server.anthropic_render import (
    PING,
    MessageStreamer,
    error_frame,
    message_response,
    new_message_id,
)
from omlx.server.anthropic_requests import (
    TokenScale,
    count_request,
    generation_request,
    resolve_model,
)
from omlx.server.event_stream import EventStream, KeepAlive
from omlx.server.generation import admit, begin, collect, pool_of, settings_of
from omlx.server.openai_requests import decode_body, new_request_id
from omlx.server.request_log import current_record
from omlx.server.sse import keepalive_interval, sse_response
from omlx.settings import Settings

OPT = {"dialect": "anthropic"}


@post("/v1/messages", status_code=200, opt=OPT)
async def create_message(request: Request[Any, Any, Any]) -> Response[Any]:
    settings = settings_of(request)
    body = decode_body(await request.body(), an.MessagesRequest)
    models = pool_of(request).list_models()
    model = resolve_model(body.model, settings, models)
    scale = TokenScale(settings, model, models)
    message_id = new_message_id()
    gen = generation_request(body, model, new_request_id("msg"))
    stream = begin(request, gen)
    if not body.stream:
        result = await collect(request, stream)
        return Response(message_response(message_id, body.model, result, scale))
    await admit(stream)
    return _stream(stream, settings, MessageStreamer(message_id, body.model, scale))


@post("/v1/messages/count_tokens", status_code=200, opt=OPT)
async def count_tokens(request: Request[Any, Any, Any]) -> an.CountTokensResponse:
    settings = settings_of(request)
    body = decode_body(await request.body(), an.CountTokensRequest)
    pool = pool_of(request)
    models = pool.list_models()
    model = resolve_model(body.model, settings, models)
    num_tokens = await pool.count_tokens(count_request(body, model, new_request_id("count")))
    return an.CountTokensResponse(input_tokens=TokenScale(settings, model, models)(num_tokens))


def record_usage(event: GenerationEvent) -> None:
    """Token counts for the request's log line (streamed routes render events themselves)."""
    if isinstance(event, Started | Done):
        record = current_record()
        record.prompt_tokens = event.prompt_tokens
        record.cached_tokens = event.cached_tokens
        if isinstance(event, Done):
            record.completion_tokens = event.completion_tokens


def _stream(stream: EventStream, settings: Settings, streamer: MessageStreamer) -> Any:
    """message_start (with the admitted prompt's counts), then `event: ping` at once and
    every keep-alive interval while the first token is pending, then the blocks."""
    interval = keepalive_interval(
        settings.server.keepalive_mode, settings.server.keepalive_interval_s
    )

    async def frames() -> AsyncGenerator[bytes, None]:
        try:
            first = await stream.next(interval)
            if first is not None:
                record_usage(first)
            if isinstance(first, Started):
                for chunk in streamer.start(first):
                    yield chunk
            else:
                if first is not None:
                    stream.push_back(first)
                for chunk in streamer.start(None):
                    yield chunk
            async for item in stream.events(interval):
                if item is KeepAlive.TICK:
                    yield PING
                    continue
                record_usage(item)
                if isinstance(item, Failed):
                    yield error_frame(item.error)
                    return
                for chunk in streamer.render(item):
                    yield chunk
        finally:
            stream.close()

    return sse_response(frames(), on_close=stream.close)


ROUTES = [create_message, count_tokens]
