"""The one exception → HTTP response mapping, rendered in the route's API dialect.

OpenAI routes answer `{"error": {message, type, param, code}}`; Anthropic routes
answer `{"type": "error", "error": {type, message}}`. A route declares its dialect
with `opt={"dialect": "anthropic"}`; paths under /v1/messages default to Anthropic.
"""

from __future__ import annotations

import enum
import logging
import re
from dataclasses import dataclass
from typing import Any

import msgspec
from litestar import Request, Response
from litestar.exceptions import HTTPException, ValidationException

from omlx.errors import (
    Forbidden,
    InvalidRequest,
    MissingExtra,
    NotFound,
    OmlxError,
    Overloaded,
    Unauthorized,
    UnsupportedMediaType,
)
from omlx.server.event_stream import ClientDisconnected
from omlx.server.request_log import CLIENT_CLOSED, current_record

log = logging.getLogger(__name__)


class Dialect(enum.StrEnum):
    OPENAI = "openai"
    ANTHROPIC = "anthropic"


@dataclass(frozen=True, slots=True)
class ErrorInfo:
    """What every dialect needs to render one error."""

    status: int
    message: str
    openai_type: str
    anthropic_type: str
    code: str | None = None
    param: str | None = None
    retry_after_s: int | None = None


_PATH_RE = re.compile(r"`\$\.?([^`]*)`")
_MISSING_RE = re.compile(r"missing required field `([^`]+)`")


def invalid_body(error: msgspec.ValidationError | msgspec.DecodeError) -> InvalidRequest:
    """A body that does not decode into the route's Struct: 400 naming the field."""
    text = str(error)
    match = _PATH_RE.search(text)
    param = match.group(1) if match and match.group(1) else None
    if missing := _MISSING_RE.search(text):
        param = f"{param}.{missing.group(1)}" if param else missing.group(1)
    if isinstance(error, msgspec.ValidationError):
        return InvalidRequest(f"invalid request body: {text}", param=param)
    return InvalidRequest(f"request body is not valid JSON: {text}", param=param)


def error_info(exc: BaseException) -> ErrorInfo:
    """Classify any exception; the single place that knows HTTP statuses."""
    if isinstance(exc, ClientDisconnected):  # nobody reads the answer; not our failure
        return ErrorInfo(CLIENT_CLOSED, "client disconnected", "client_closed", "client_closed")
    if isinstance(exc, OmlxError):
        return _omlx_info(exc)
    if isinstance(exc, msgspec.ValidationError | msgspec.DecodeError):
        return _omlx_info(invalid_body(exc))
    if isinstance(exc, ValidationException):
        return ErrorInfo(400, str(exc.detail), "invalid_request_error", "invalid_request_error")
    if isinstance(exc, HTTPException):
        return _http_info(exc)
    return ErrorInfo(
        500,
        f"internal error: {type(exc).__name__}: {exc}",
        "server_error",
        "api_error",
        code="internal_error",
    )


def _omlx_info(exc: OmlxError) -> ErrorInfo:
    if isinstance(exc, InvalidRequest):
        status, otype, atype = 400, "invalid_request_error", "invalid_request_error"
    elif isinstance(exc, Unauthorized):
        status, otype, atype = 401, "authentication_error", "authentication_error"
    elif isinstance(exc, Forbidden):
        status, otype, atype = 403, "permission_error", "permission_error"
    elif isinstance(exc, UnsupportedMediaType):
        status, otype, atype = 415, "invalid_request_error", "invalid_request_error"
    elif isinstance(exc, NotFound):
        status, otype, atype = 404, "invalid_request_error", "not_found_error"
    elif isinstance(exc, MissingExtra):  # the install, not the request: 501 Not Implemented
        status, otype, atype = 501, "server_error", "api_error"
    elif isinstance(exc, Overloaded):
        return ErrorInfo(
            503,
            exc.message,
            "overloaded_error",
            "overloaded_error",
            code=exc.code,
            retry_after_s=exc.retry_after_s,
        )
    else:
        status, otype, atype = 500, "server_error", "api_error"
    return ErrorInfo(status, exc.message, otype, atype, code=exc.code, param=exc.param)


def _http_info(exc: HTTPException) -> ErrorInfo:
    status = exc.status_code
    if status == 401:
        types = ("authentication_error", "authentication_error")
    elif status == 403:
        types = ("permission_error", "permission_error")
    elif status == 404:
        types = ("invalid_request_error", "not_found_error")
    elif status == 413:
        types = ("invalid_request_error", "request_too_large")
    elif status < 500:
        types = ("invalid_request_error", "invalid_request_error")
    else:
        types = ("server_error", "api_error")
    return ErrorInfo(status, str(exc.detail), types[0], types[1])


def dialect_of(request: Request[Any, Any, Any]) -> Dialect:
    try:
        opt = request.route_handler.opt
    except Exception:  # raised before routing (unknown path): no handler yet
        opt = {}
    if "dialect" in opt:
        return Dialect(opt["dialect"])
    if request.url.path.startswith("/v1/messages"):
        return Dialect.ANTHROPIC
    return Dialect.OPENAI


def error_body(info: ErrorInfo, dialect: Dialect) -> dict[str, Any]:
    if dialect is Dialect.ANTHROPIC:
        return {"type": "error", "error": {"type": info.anthropic_type, "message": info.message}}
    return {
        "error": {
            "message": info.message,
            "type": info.openai_type,
            "param": info.param,
            "code": info.code,
        }
    }


def http_status(info: ErrorInfo, dialect: Dialect) -> int:
    # Anthropic's clients treat 529 as "overloaded, retry"; OpenAI's expect 503.
    if info.status == 503 and dialect is Dialect.ANTHROPIC:
        return 529
    return info.status


def error_response(exc: BaseException, dialect: Dialect) -> Response[Any]:
    info = error_info(exc)
    if info.status == CLIENT_CLOSED:
        current_record().finish = "disconnected"
    elif info.status >= 500 and info.retry_after_s is None:
        log.error("request failed: %s", info.message, exc_info=exc)
    headers = {}
    if info.retry_after_s is not None:
        headers["Retry-After"] = str(info.retry_after_s)
    if info.status == 401:
        headers["WWW-Authenticate"] = "Bearer"
    return Response(
        content=error_body(info, dialect),
        status_code=http_status(info, dialect),
        headers=headers,
        media_type="application/json",
    )


def exception_handler(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    """Litestar handler for every exception; registered once in create_app."""
    return error_response(exc, dialect_of(request))
