"""POST /v1/completions (legacy text completions)."""

from __future__ import annotations

from typing import Any

from litestar import Request, Response, post

from omlx.schemas.openai import Completion, CompletionRequest
from omlx.server.generation import admit, begin, collect, pool_of, settings_of, stream_response
from omlx.server.json_body import read_json
from omlx.server.openai_render import CompletionChunker, completion, error_frame
from omlx.server.openai_requests import (
    completion_generation_request,
    new_request_id,
)
from omlx.server.openapi import documented


@post(
    "/v1/completions",
    status_code=200,
    opt={"dialect": "openai"},
    operation_class=documented(
        body=CompletionRequest, returns=Completion, events=True, overload=True
    ),
)
async def completions(request: Request[Any, Any, Any]) -> Response[Any]:
    settings = settings_of(request)
    body = await read_json(request, CompletionRequest)
    gen = completion_generation_request(body, settings, new_request_id("cmpl"))
    echo = gen.prompt or "" if body.echo else ""
    want_logprobs = body.logprobs is not None
    scored = None
    if echo and want_logprobs:  # the prompt's own logprobs: one forward pass, first
        scored = await pool_of(request).prompt_logprobs(gen.model, echo, body.logprobs or 0)
    stream = begin(request, gen)
    if not body.stream:
        result = await collect(request, stream)
        return Response(
            completion(
                gen.request_id,
                gen.model,
                result,
                echo=echo,
                want_logprobs=want_logprobs,
                prompt_logprobs=scored,
            )
        )
    await admit(stream)
    chunker = CompletionChunker(
        request_id=gen.request_id,
        model=gen.model,
        include_usage=bool(body.stream_options and body.stream_options.include_usage),
        want_logprobs=want_logprobs,
        echo=echo,
        prompt_logprobs=scored,
    )
    return stream_response(
        stream,
        settings,
        chunker.render,
        empty_chunk=chunker.empty_chunk(),
        error_frame=error_frame,
    )


ROUTES = [completions]
