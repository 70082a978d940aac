"""One log line per request, and a logging filter that tags records with request_id/model.

The route fills in the current `RequestRecord` (model, token counts); the middleware
writes the line when the response (streamed or not) has been sent. No prompt text.
"""

from __future__ import annotations

import contextvars
import logging
import time
from dataclasses import dataclass
from typing import Any

from litestar.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger("omlx.server.access")

# Polled by dashboards every second: logged at DEBUG so INFO stays readable.
QUIET_PATHS = ("/health", "/api/stats")


@dataclass(slots=True)
class RequestRecord:
    request_id: str = "-"
    model: str = "-"
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    finish: str = "-"  # the engine's finish reason, "disconnected" or "error"
    served_by: str = "-"  # which engine path served it: batch or dflash


_current: contextvars.ContextVar[RequestRecord | None] = contextvars.ContextVar(
    "omlx_request", default=None
)


def current_record() -> RequestRecord:
    """The record of the request being served (a throwaway one outside a request)."""
    record = _current.get()
    return record if record is not None else RequestRecord()


class RequestContextFilter(logging.Filter):
    """Adds `request_id` and `model` to every record (for format strings)."""

    def filter(self, record: logging.LogRecord) -> bool:
        current = _current.get()
        record.request_id = current.request_id if current else "-"
        record.model = current.model if current else "-"
        return True


class RequestLogMiddleware:
    """Pure ASGI middleware: times the request and logs method, path, model, status, tokens."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        record = RequestRecord()
        token = _current.set(record)
        start = time.perf_counter()
        status = 0

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            _log_line(scope, record, status or 500, time.perf_counter() - start)
            _current.reset(token)


def _log_line(scope: Any, record: RequestRecord, status: int, duration_s: float) -> None:
    path = scope.get("path", "")
    level = logging.DEBUG if path.startswith(QUIET_PATHS) else logging.INFO
    if not log.isEnabledFor(level):
        return
    log.log(
        level,
        "%s %s model=%s status=%d prompt_tokens=%d completion_tokens=%d "
        "cached_tokens=%d finish=%s served_by=%s duration_ms=%.0f",
        scope.get("method", "-"),
        path,
        record.model,
        status,
        record.prompt_tokens,
        record.completion_tokens,
        record.cached_tokens,
        record.finish,
        record.served_by,
        duration_s * 1000,
    )
