"""GET /v1/models and /v1/models/{model_id}: what can be served, its type and status."""

from __future__ import annotations

from typing import Any

from litestar import Request, get

from omlx.engine.api import ModelInfo
from omlx.errors import ModelNotFound
from omlx.schemas.openai import ModelCard, ModelList
from omlx.server.generation import pool_of
from omlx.server.openapi import documented


def model_card(info: ModelInfo) -> ModelCard:
    return ModelCard(
        id=info.id,
        created=info.created,
        type=info.type,
        status="loaded" if info.loaded else "available",
        pinned=info.pinned,
        context_length=info.context_length,
        max_model_len=info.context_length,
    )


@get("/v1/models", opt={"dialect": "openai"}, operation_class=documented(returns=ModelList))
async def list_models(request: Request[Any, Any, Any]) -> ModelList:
    return ModelList(data=[model_card(m) for m in pool_of(request).list_models()])


@get(
    "/v1/models/{model_id:path}",
    opt={"dialect": "openai"},
    operation_class=documented(returns=ModelCard),
)
async def get_model(request: Request[Any, Any, Any]) -> ModelCard:
    model_id = str(request.path_params["model_id"]).lstrip("/")
    for info in pool_of(request).list_models():
        if info.id == model_id:
            return model_card(info)
    raise ModelNotFound(f"model {model_id!r} not found", param="model")


ROUTES = [list_models, get_model]
