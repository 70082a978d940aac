"""POST /v1/chat/completions."""

from __future__ import annotations

from typing import Any

from litestar import Request, Response, post

from omlx.schemas.openai import ChatCompletion, ChatCompletionRequest
from omlx.server.generation import admit, begin, collect, settings_of, stream_response
from omlx.server.json_body import read_json
from omlx.server.openai_render import ChatChunker, chat_completion, error_frame
from omlx.server.openai_requests import chat_generation_request, new_request_id
from omlx.server.openapi import documented


@post(
    "/v1/chat/completions",
    status_code=200,
    opt={"dialect": "openai"},
    operation_class=documented(
        body=ChatCompletionRequest, returns=ChatCompletion, events=True, overload=True
    ),
)
async def chat_completions(request: Request[Any, Any, Any]) -> Response[Any]:
    settings = settings_of(request)
    body = await read_json(request, ChatCompletionRequest, images=True)
    gen = chat_generation_request(body, settings, new_request_id("chatcmpl"))
    stream = begin(request, gen)
    if not body.stream:
        result = await collect(request, stream)
        return Response(
            chat_completion(gen.request_id, gen.model, result, want_logprobs=body.logprobs)
        )
    await admit(stream)
    chunker = ChatChunker(
        request_id=gen.request_id,
        model=gen.model,
        include_usage=bool(body.stream_options and body.stream_options.include_usage),
        want_logprobs=body.logprobs,
    )
    return stream_response(
        stream,
        settings,
        chunker.render,
        empty_chunk=chunker.empty_chunk(),
        error_frame=error_frame,
    )


ROUTES = [chat_completions]
