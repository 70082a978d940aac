"""Model pool control: GET /v1/models/status, POST /v1/models/{id}/load|unload|pin|unpin."""

from __future__ import annotations

from typing import Any, Literal, cast

from litestar import Request, get, post

from omlx.errors import InvalidRequest
from omlx.schemas.models import ModelActionResult, PoolStatus
from omlx.server.generation import pool_of, settings_of
from omlx.server.model_limits import advised_output_tokens
from omlx.server.openapi import documented

ACTIONS = ("load", "unload", "pin", "unpin")
Action = Literal["load", "unload", "pin", "unpin"]
CHAT_TYPES = ("llm", "vlm")


@get("/v1/models/status", opt={"dialect": "openai"}, operation_class=documented(returns=PoolStatus))
async def models_status(request: Request[Any, Any, Any]) -> PoolStatus:
    pool = pool_of(request)
    status = pool.status()
    windows = {m.id: m.context_length for m in pool.list_models()}
    engine = settings_of(request).engine
    for row in status.data:
        if row.type in CHAT_TYPES:
            row.context_length = windows.get(row.id)
            row.max_output_tokens = advised_output_tokens(row.context_length, engine)
    return status


# Model ids may hold "/" (org/name), so the action is the path's last segment.
@post(
    "/v1/models/{target:path}",
    status_code=200,
    opt={"dialect": "openai"},
    operation_class=documented(returns=ModelActionResult, overload=True),
)
async def model_action(request: Request[Any, Any, Any]) -> ModelActionResult:
    target = str(request.path_params["target"]).strip("/")
    model_id, _, action = target.rpartition("/")
    if action not in ACTIONS or not model_id:
        raise InvalidRequest(
            f"POST /v1/models/{{id}}/{{action}}: action must be one of {', '.join(ACTIONS)}",
            param="action",
        )
    pool = pool_of(request)
    if action == "load":
        await pool.load(model_id)
    elif action == "unload":
        await pool.unload(model_id)
    elif action == "pin":
        await pool.pin(model_id)
    else:
        await pool.unpin(model_id)
    return _result(pool.status(), model_id, cast(Action, action))


def _result(status: PoolStatus, model_id: str, action: Action) -> ModelActionResult:
    row = next((m for m in status.data if m.id == model_id), None)
    if row is None:  # the pool knows it under its resolved name; report what we can
        row = next((m for m in status.data if m.id.endswith("/" + model_id)), None)
    return ModelActionResult(
        id=row.id if row else model_id,
        action=action,
        state=row.state if row else "available",
        pinned=row.pinned if row else False,
    )


ROUTES = [models_status, model_action]
