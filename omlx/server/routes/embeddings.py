"""POST /v1/embeddings (OpenAI): strings or token ids in, float or base64 vectors out."""

from __future__ import annotations

import base64
import struct
from typing import Any

from litestar import Request, post

from omlx.engine.api import EmbeddingRequest
from omlx.errors import InvalidRequest
from omlx.schemas.embeddings import (
    Embedding,
    EmbeddingsRequest,
    EmbeddingsResponse,
    EmbeddingsUsage,
)
from omlx.server.generation import pool_of, settings_of
from omlx.server.json_body import read_json
from omlx.server.openapi import documented

MAX_INPUTS = 2048  # OpenAI's limit on inputs per request


def parse_input(value: Any) -> list[str] | list[list[int]]:
    """OpenAI's four input shapes -> a list of strings or a list of token-id lists."""
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list) or not value:
        raise InvalidRequest("input must be a string or a non-empty list", param="input")
    if len(value) > MAX_INPUTS:
        raise InvalidRequest(f"at most {MAX_INPUTS} inputs per request", param="input")
    if all(isinstance(v, str) for v in value):
        return list(value)
    if all(_is_int(v) for v in value):
        return [list(value)]
    if all(isinstance(v, list) and v and all(_is_int(t) for t in v) for v in value):
        return [list(v) for v in value]
    raise InvalidRequest(
        "input must be a string, a list of strings, a list of token ids or a list of "
        "token-id lists",
        param="input",
    )


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def encode_base64(vector: list[float]) -> str:
    """Little-endian float32, as the OpenAI client decodes it."""
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")


@post(
    "/v1/embeddings",
    status_code=200,
    opt={"dialect": "openai"},
    operation_class=documented(body=EmbeddingsRequest, returns=EmbeddingsResponse, overload=True),
)
async def embeddings(request: Request[Any, Any, Any]) -> EmbeddingsResponse:
    body = await read_json(request, EmbeddingsRequest)
    if body.dimensions is not None and body.dimensions < 1:
        raise InvalidRequest("dimensions must be at least 1", param="dimensions")
    model = body.model or settings_of(request).engine.default_model
    result = await pool_of(request).embed(
        EmbeddingRequest(
            model=model,
            inputs=parse_input(body.input),
            dimensions=body.dimensions,
            truncate=body.truncate,
        )
    )
    as_base64 = body.encoding_format == "base64"
    return EmbeddingsResponse(
        data=[
            Embedding(embedding=encode_base64(v) if as_base64 else v, index=i)
            for i, v in enumerate(result.embeddings)
        ],
        model=result.model,
        usage=EmbeddingsUsage(
            prompt_tokens=result.prompt_tokens,
            total_tokens=result.prompt_tokens,
            truncated_inputs=result.truncated_inputs,
        ),
    )


ROUTES = [embeddings]
