"""One log line per request, and a logging filter that tags records with request_id/model.

The route fills in the current `RequestRecord` (model, token counts); the middleware
writes the line when the response (streamed or not) has been sent. No prompt text.
Clients choose paths and model names: control characters in them are escaped, so a
request cannot forge log lines or send terminal escapes to whoever tails the log.
"""

from __future__ import annotations

import contextvars
import logging
import re
import time
from dataclasses import dataclass
from typing import Any

from litestar.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger("omlx.server.access")

# Polled by dashboards every second: logged at DEBUG so INFO stays readable.
QUIET_PATHS = ("/health", "/api/stats", "/admin/static/")
# The web admin's pages poll these; their reads are DEBUG, their changes INFO.
QUIET_GET_PATHS = ("/admin/api/", "/api/cache/stats")


@dataclass(slots=True)
class RequestRecord:
    request_id: str = "-"
    model: str = "-"
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    finish: str = "-"  # the engine's finish reason, "disconnected" or "error"
    served_by: str = "-"  # which engine path served it: batch or dflash
    requested_max_tokens: int | None = None
    max_tokens: int | None = None  # in force; less than requested when clamped to the context


# Status logged for a request whose client left before any response was sent (nginx's).
CLIENT_CLOSED = 499

_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 256 else f"\\u{code:04x}"


def escape_control(text: str) -> str:
    """`text` with C0/C1 controls, DEL and Unicode line breaks as visible escapes."""
    return _CONTROL.sub(_escaped, text)


class SafeFormatter(logging.Formatter):
    """Escapes control characters in every message (tracebacks keep their lines)."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = escape_control(record.message)
        return super().formatMessage(record)


@dataclass(slots=True)
class HttpCounters:
    """Per app: requests answered, clients that left first, 5xx answers."""

    requests_total: int = 0
    client_disconnects_total: int = 0
    server_errors_total: int = 0


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
            if record.finish == "disconnected" and status in (0, 500):
                status = CLIENT_CLOSED  # nothing (or only an error about it) was sent
            _count(scope, status or 500, record.finish == "disconnected")
            _log_line(scope, record, status or 500, time.perf_counter() - start)
            _current.reset(token)


def _count(scope: Any, status: int, is_disconnect: bool) -> None:
    app = scope.get("litestar_app")
    counters = app.state.get("http_counters") if app is not None else None
    if counters is None:
        return
    counters.requests_total += 1
    if is_disconnect:  # before any answer (499) or in the middle of a stream (200)
        counters.client_disconnects_total += 1
    elif status >= 500:
        counters.server_errors_total += 1


def _log_line(scope: Any, record: RequestRecord, status: int, duration_s: float) -> None:
    path = scope.get("path", "")
    quiet = path.startswith(QUIET_PATHS) or (
        scope.get("method") == "GET" and path.startswith(QUIET_GET_PATHS)
    )
    level = logging.DEBUG if quiet else logging.INFO
    if not log.isEnabledFor(level):
        return
    clamped = ""
    if record.max_tokens is not None and record.requested_max_tokens not in (
        None,
        record.max_tokens,
    ):  # an agent asked for more than the context leaves
        clamped = f" max_tokens={record.requested_max_tokens}->{record.max_tokens}"
    log.log(
        level,
        "%s %s model=%s status=%d prompt_tokens=%d completion_tokens=%d "
        "cached_tokens=%d finish=%s served_by=%s duration_ms=%.0f%s",
        escape_control(scope.get("method", "-")),
        escape_control(path),
        escape_control(record.model),
        status,
        record.prompt_tokens,
        record.completion_tokens,
        record.cached_tokens,
        record.finish,
        record.served_by,
        duration_s * 1000,
        clamped,
    )
