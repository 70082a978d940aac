"""POST /v1/messages and /v1/messages/count_tokens (Anthropic Messages API)."""

from __future__ import annotations

from typing import Any

from litestar import Request, Response, post

from omlx.engine.api import Started
from omlx.schemas import anthropic as an
from omlx.server.anthropic_render import (
    PING,
    MessageStreamer,
    error_frame,
    message_response,
    new_message_id,
)
from omlx.server.anthropic_requests import (
    CONTEXT_WINDOW_HEADER,
    TokenScale,
    context_window_override,
    count_request,
    generation_request,
    resolve_model,
)
from omlx.server.event_stream import EventStream
from omlx.server.generation import (
    admit,
    begin,
    collect,
    event_frames,
    note_event,
    pool_of,
    settings_of,
)
from omlx.server.json_body import read_json
from omlx.server.openai_requests import new_request_id
from omlx.server.openapi import documented
from omlx.server.sse import keepalive_interval, sse_response
from omlx.settings import Settings

OPT = {"dialect": "anthropic"}


@post(
    "/v1/messages",
    status_code=200,
    opt=OPT,
    operation_class=documented(
        body=an.MessagesRequest,
        returns=an.MessageResponse,
        events=True,
        dialect="anthropic",
        overload=True,
    ),
)
async def create_message(request: Request[Any, Any, Any]) -> Response[Any]:
    settings = settings_of(request)
    body = await read_json(request, an.MessagesRequest, images=True)
    models = pool_of(request).list_models()
    model = resolve_model(body.model, settings, models)
    scale = TokenScale(settings, model, models, _window(request))
    message_id = new_message_id()
    gen = generation_request(body, model, new_request_id("msg"))
    stream = begin(request, gen)
    if not body.stream:
        result = await collect(request, stream)
        return Response(message_response(message_id, body.model, result, scale))
    await admit(stream)
    return _stream(stream, settings, MessageStreamer(message_id, body.model, scale))


@post(
    "/v1/messages/count_tokens",
    status_code=200,
    opt=OPT,
    operation_class=documented(
        body=an.CountTokensRequest,
        returns=an.CountTokensResponse,
        dialect="anthropic",
        overload=True,
    ),
)
async def count_tokens(request: Request[Any, Any, Any]) -> an.CountTokensResponse:
    settings = settings_of(request)
    body = await read_json(request, an.CountTokensRequest, images=True)
    pool = pool_of(request)
    models = pool.list_models()
    model = resolve_model(body.model, settings, models)
    num_tokens = await pool.count_tokens(count_request(body, model, new_request_id("count")))
    scale = TokenScale(settings, model, models, _window(request))
    return an.CountTokensResponse(input_tokens=scale(num_tokens))


def _window(request: Request[Any, Any, Any]) -> int | None:
    return context_window_override(request.headers.get(CONTEXT_WINDOW_HEADER))


def _stream(stream: EventStream, settings: Settings, streamer: MessageStreamer) -> Any:
    """message_start (with the admitted prompt's counts), then `event: ping` at once and
    every keep-alive interval while the first token is pending, then the blocks."""
    interval = keepalive_interval(
        settings.server.keepalive_mode, settings.server.keepalive_interval_s
    )

    async def opening() -> list[bytes]:
        first = await stream.next(interval)
        if first is not None:
            note_event(first)
        if isinstance(first, Started):
            return streamer.start(first)
        if first is not None:
            stream.push_back(first)
        return streamer.start(None)

    frames = event_frames(
        stream,
        streamer.render,
        interval=interval,
        tick=PING,
        error_frame=error_frame,
        opening=opening,
    )
    return sse_response(frames, on_close=stream.close)


ROUTES = [create_message, count_tokens]
