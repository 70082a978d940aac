"""Engine events → Anthropic Messages responses and their exact SSE event sequence."""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import uuid
from collections.abc import Callable
from typing import Any

from omlx.engine.api import Done, FinishReason, Started, Token, ToolCall
from omlx.schemas import anthropic as an
from omlx.server.errors import Dialect, error_body, error_info
from omlx.server.generation import Collected
from omlx.server.sse import frame

log = logging.getLogger(__name__)

PING = frame({"type": "ping"}, event="ping")


def new_message_id() -> str:
    return f"msg_{uuid.uuid4().hex[:24]}"


def tool_use_id(call: ToolCall) -> str:
    return "toolu_" + call.id.removeprefix("call_")


def thinking_signature(thinking: str) -> str:
    # Clients send thinking blocks back with their signature; ours only marks it as ours.
    return base64.b64encode(hashlib.sha256(thinking.encode()).digest()).decode()


def tool_input(call: ToolCall) -> dict[str, Any]:
    try:
        value = json.loads(call.arguments or "{}")
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def stop_reason(done: Done | None, has_tool_calls: bool) -> tuple[an.StopReason, str | None]:
    if done is not None and done.stop_sequence:
        return "stop_sequence", done.stop_sequence
    if has_tool_calls or (done is not None and done.finish_reason is FinishReason.TOOL_CALLS):
        return "tool_use", None
    if done is not None and done.finish_reason is FinishReason.LENGTH:
        return "max_tokens", None
    return "end_turn", None


def usage(
    prompt_tokens: int, cached_tokens: int, output_tokens: int, scale: Callable[[int], int]
) -> an.Usage:
    # Anthropic's input_tokens excludes cache reads: the three input fields sum to the prompt.
    cached = scale(cached_tokens)
    return an.Usage(
        input_tokens=scale(prompt_tokens) - cached,
        output_tokens=scale(output_tokens),
        cache_read_input_tokens=cached,
    )


def message_response(
    message_id: str, model: str, result: Collected, scale: Callable[[int], int]
) -> an.MessageResponse:
    content: list[an.OutBlock] = []
    if result.reasoning:
        content.append(
            an.OutThinking(
                thinking=result.reasoning, signature=thinking_signature(result.reasoning)
            )
        )
    if result.text:
        content.append(an.OutText(text=result.text))
    for call in result.tool_calls:
        content.append(an.OutToolUse(id=tool_use_id(call), name=call.name, input=tool_input(call)))
    reason, sequence = stop_reason(result.done, bool(result.tool_calls))
    done = result.done
    return an.MessageResponse(
        id=message_id,
        model=model,
        content=content,
        stop_reason=reason,
        stop_sequence=sequence,
        usage=usage(
            done.prompt_tokens if done else 0,
            done.cached_tokens if done else 0,
            done.completion_tokens if done else 0,
            scale,
        ),
    )


def error_frame(exc: BaseException) -> bytes:
    info = error_info(exc)
    if info.status >= 500 and info.retry_after_s is None:
        log.error("stream failed: %s", info.message, exc_info=exc)
    return frame(error_body(info, Dialect.ANTHROPIC), event="error")


class MessageStreamer:
    """Turns one request's events into message_start … message_stop frames.

    Blocks open lazily: a change of kind (thinking → text) closes the open block;
    every tool call is its own block, opened, filled and closed at once.
    """

    def __init__(self, message_id: str, model: str, scale: Callable[[int], int]) -> None:
        self.message_id = message_id
        self.model = model
        self._scale = scale
        self._is_started = False
        self._index = -1
        self._open: str | None = None  # "thinking" | "text" | None
        self._thinking = ""
        self._has_tool_calls = False

    @property
    def is_started(self) -> bool:
        return self._is_started

    def start(self, started: Started | None) -> list[bytes]:
        """message_start; counts are exact when the engine already admitted the request."""
        if self._is_started:
            return []
        self._is_started = True
        prompt = started.prompt_tokens if started else 0
        cached = started.cached_tokens if started else 0
        counts = usage(prompt, cached, 0, self._scale)
        counts.output_tokens = 1  # as Anthropic reports it before the first token
        message = {
            "id": self.message_id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": counts,
        }
        return [_event("message_start", {"message": message})]

    def render(self, event: Any) -> list[bytes]:
        if isinstance(event, Started):
            return self.start(event)
        out = self.start(None)
        if isinstance(event, Token):
            if event.reasoning:
                out += self._delta(
                    "thinking", {"type": "thinking_delta", "thinking": event.reasoning}
                )
                self._thinking += event.reasoning
            if event.text:
                out += self._delta("text", {"type": "text_delta", "text": event.text})
            for call in event.tool_calls:
                out += self._tool_use(call)
        elif isinstance(event, Done):
            out += self._close()
            out += self._finish(event)
        return out

    def _open_block(self, block: dict[str, Any]) -> list[bytes]:
        self._index += 1
        return [_event("content_block_start", {"index": self._index, "content_block": block})]

    def _close(self) -> list[bytes]:
        if self._open is None:
            return []
        out = []
        if self._open == "thinking":
            signature = {"type": "signature_delta", "signature": thinking_signature(self._thinking)}
            out.append(_event("content_block_delta", {"index": self._index, "delta": signature}))
            self._thinking = ""
        out.append(_event("content_block_stop", {"index": self._index}))
        self._open = None
        return out

    def _delta(self, kind: str, delta: dict[str, Any]) -> list[bytes]:
        out: list[bytes] = []
        if self._open != kind:
            out += self._close()
            empty = (
                {"type": "thinking", "thinking": "", "signature": ""}
                if kind == "thinking"
                else {
                    "type": "text",
                    "text": "",
                }
            )
            out += self._open_block(empty)
            self._open = kind
        out.append(_event("content_block_delta", {"index": self._index, "delta": delta}))
        return out

    def _tool_use(self, call: ToolCall) -> list[bytes]:
        self._has_tool_calls = True
        out = self._close()
        out += self._open_block(
            {"type": "tool_use", "id": tool_use_id(call), "name": call.name, "input": {}}
        )
        arguments = json.dumps(tool_input(call), ensure_ascii=False)
        delta = {"type": "input_json_delta", "partial_json": arguments}
        out.append(_event("content_block_delta", {"index": self._index, "delta": delta}))
        out.append(_event("content_block_stop", {"index": self._index}))
        return out

    def _finish(self, done: Done) -> list[bytes]:
        reason, sequence = stop_reason(done, self._has_tool_calls)
        counts = usage(done.prompt_tokens, done.cached_tokens, done.completion_tokens, self._scale)
        return [
            _event(
                "message_delta",
                {"delta": {"stop_reason": reason, "stop_sequence": sequence}, "usage": counts},
            ),
            _event("message_stop", {}),
        ]


def _event(name: str, payload: dict[str, Any]) -> bytes:
    return frame({"type": name, **payload}, event=name)
