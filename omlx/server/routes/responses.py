"""POST /v1/responses (OpenAI Responses API, used by Codex) and GET /v1/responses/{id}."""

from __future__ import annotations

from typing import Any

from litestar import Request, Response, get, post

from omlx.engine.api import GenerationEvent
from omlx.schemas import responses as rs
from omlx.server.anthropic_requests import resolve_model
from omlx.server.event_stream import EventStream
from omlx.server.generation import admit, begin, collect, event_frames, pool_of, settings_of
from omlx.server.json_body import read_json
from omlx.server.openai_requests import new_request_id
from omlx.server.openapi import documented
from omlx.server.responses_render import (
    ResponseStreamer,
    answer_message,
    final_response,
    new_id,
)
from omlx.server.responses_requests import ResponseStore, generation_request
from omlx.server.sse import keepalive_interval, sse_response
from omlx.settings import Settings

OPT = {"dialect": "openai"}


def store_of(request: Request[Any, Any, Any]) -> ResponseStore:
    state = request.app.state
    store = state.get("responses_store")
    if store is None:
        store = ResponseStore(settings_of(request).agents.max_stored_responses)
        state["responses_store"] = store
    return store


@post(
    "/v1/responses",
    status_code=200,
    opt=OPT,
    operation_class=documented(
        body=rs.ResponsesRequest, returns=rs.ResponseObject, events=True, overload=True
    ),
)
async def create_response(request: Request[Any, Any, Any]) -> Response[Any]:
    settings = settings_of(request)
    body = await read_json(request, rs.ResponsesRequest, images=True)
    store = store_of(request)
    model = resolve_model(body.model, settings, pool_of(request).list_models())
    history = store.conversation(body.previous_response_id) if body.previous_response_id else []
    gen, conversation = generation_request(body, model, new_request_id("resp"), history)
    response_id = new_id("resp")
    stream = begin(request, gen)
    if not body.stream:
        result = await collect(request, stream)
        response = final_response(response_id, body, model, result)
        if body.store:
            store.put(response, [*conversation, answer_message(result)])
        return Response(response)
    await admit(stream)
    streamer = ResponseStreamer(response_id, body, model)
    return _stream(stream, settings, streamer, store if body.store else None, conversation)


@get(
    "/v1/responses/{response_id:str}",
    opt=OPT,
    operation_class=documented(returns=rs.ResponseObject),
)
async def get_response(request: Request[Any, Any, Any]) -> rs.ResponseObject:
    return store_of(request).response(request.path_params["response_id"])


def _stream(
    stream: EventStream,
    settings: Settings,
    streamer: ResponseStreamer,
    store: ResponseStore | None,
    conversation: list[Any],
) -> Any:
    mode = settings.server.keepalive_mode

    async def opening() -> list[bytes]:
        return streamer.start()

    def render(item: GenerationEvent) -> list[bytes]:
        chunks = streamer.render(item)
        if store is not None and streamer.final is not None:
            # Stored before the client sees response.completed, so it can continue.
            store.put(streamer.final, [*conversation, answer_message(streamer.result)])
        return chunks

    frames = event_frames(
        stream,
        render,
        interval=keepalive_interval(mode, settings.server.keepalive_interval_s),
        tick=streamer.keepalive if mode != "off" else None,
        error_frame=streamer.error,
        opening=opening,
    )
    return sse_response(frames, on_close=stream.close)


ROUTES = [create_response, get_response]
