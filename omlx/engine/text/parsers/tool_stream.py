"""Streaming extraction of tool calls from content, for any tag-delimited format."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass

from omlx.engine.api import ToolCall
from omlx.engine.text.parsers.delta import find_first, make_tool_call, partial_marker_len
from omlx.engine.text.parsers.json_calls import RawCall


@dataclass(frozen=True, slots=True)
class Span:
    start: str
    end: str | None  # None: the call runs to the end of the output


@dataclass(frozen=True, slots=True)
class ToolFormat:
    name: str
    spans: tuple[Span, ...]
    # (start marker, body between the markers) -> calls, or None when malformed.
    parse: Callable[[str, str], list[RawCall] | None]
    # Llama-3: a message that is only a JSON call object, with no marker at all.
    bare_json: bool = False
    # The body is JSON, so an end marker inside one of its strings does not end the call.
    json_body: bool = False


class _Bare(enum.Enum):
    HOLD = "hold"
    COMMIT = "commit"
    NO = "no"


_BARE_KEYS = ('"name"', '"type"', '"function"')


def _bare_json_state(buf: str) -> _Bare:
    """Could the message so far be the start of a bare JSON tool call?"""
    text = buf.lstrip()
    if not text:
        return _Bare.HOLD
    if text[0] != "{":
        return _Bare.NO
    rest = text[1:].lstrip()
    if not rest:
        return _Bare.HOLD
    for key in _BARE_KEYS:
        if rest.startswith(key):
            return _Bare.COMMIT
        if key.startswith(rest):
            return _Bare.HOLD
    return _Bare.NO


def _ends_inside_json_string(text: str) -> bool:
    inside = escaped = False
    for ch in text:
        if escaped:
            escaped = False
        elif ch == "\\" and inside:
            escaped = True
        elif ch == '"':
            inside = not inside
    return inside


class ToolCallExtractor:
    """Separates tool-call markup from content as text streams in.

    Outside a call, only a partial start marker and trailing whitespace are held
    (whitespace next to a call is dropped). Inside a call, the body is held until
    its end marker; a body that does not parse is released as content, verbatim.
    """

    def __init__(self, fmt: ToolFormat) -> None:
        self._fmt = fmt
        self._starts = tuple(span.start for span in fmt.spans)
        self._buf = ""
        self._span: Span | None = None
        # Whitespace before the open span: dropped if it holds a call, kept if it degrades.
        self._span_lead = ""
        self._num_scanned = 0  # chars of an open span's body already searched for its end
        self._bare = False
        self._at_message_start = fmt.bare_json
        self._after_call = False
        self._num_calls = 0

    def feed(self, text: str) -> tuple[str, list[ToolCall]]:
        self._buf += text
        content: list[str] = []
        calls: list[ToolCall] = []
        while self._buf and not self._bare:
            if self._span is not None:
                if not self._step_inside(content, calls):
                    break
            elif not self._step_outside(content):
                break
        return "".join(content), calls

    def finish(self) -> tuple[str, list[ToolCall]]:
        text, self._buf = self._buf, ""
        calls: list[ToolCall] = []
        if self._bare:
            parsed = self._fmt.parse("", text)
            return ("", self._calls(parsed)) if parsed else (text, calls)
        if self._span is not None:
            span, self._span = self._span, None
            parsed = self._fmt.parse(span.start, text) if span.end is None else None
            if parsed:
                return "", self._calls(parsed)
            return self._lead(self._span_lead + span.start + text), calls
        if self._num_calls and not text.strip():
            return "", calls
        return self._lead(text), calls

    def _calls(self, raw: list[RawCall]) -> list[ToolCall]:
        self._num_calls += len(raw)
        self._after_call = True
        return [make_tool_call(name, arguments) for name, arguments in raw]

    def _lead(self, text: str) -> str:
        if self._after_call:
            text = text.lstrip()
            if text:
                self._after_call = False
        return text

    def _step_inside(self, content: list[str], calls: list[ToolCall]) -> bool:
        span = self._span
        assert span is not None
        if span.end is None:
            return False
        # Resume the search where the last one stopped: long call bodies stay linear.
        i = self._buf.find(span.end, max(0, self._num_scanned - len(span.end) + 1))
        while i >= 0 and self._fmt.json_body and _ends_inside_json_string(self._buf[:i]):
            # `{"city": "</tool_call>"}` is one call: its end marker is further on.
            i = self._buf.find(span.end, i + len(span.end))
        if i < 0:
            self._num_scanned = len(self._buf)
            return False
        self._num_scanned = 0
        body = self._buf[:i]
        self._buf = self._buf[i + len(span.end) :]
        self._span = None
        parsed = self._fmt.parse(span.start, body)
        if parsed:
            calls.extend(self._calls(parsed))
        else:
            content.append(self._lead(self._span_lead + span.start + body + span.end))
        return True

    def _step_outside(self, content: list[str]) -> bool:
        if self._at_message_start:
            state = _bare_json_state(self._buf)
            if state is _Bare.HOLD:
                return False
            if state is _Bare.COMMIT:
                self._bare = True
                return False
            self._at_message_start = False
        hit = find_first(self._buf, self._starts)
        if hit is not None:
            i, marker = hit
            before = self._buf[:i].rstrip()
            self._span_lead = self._buf[len(before) : i]
            content.append(self._lead(before))
            self._buf = self._buf[i + len(marker) :]
            self._span = next(span for span in self._fmt.spans if span.start == marker)
            return True
        hold = partial_marker_len(self._buf, self._starts)
        # Trailing whitespace is held too: it is dropped if a call follows.
        keep = len(self._buf[: len(self._buf) - hold].rstrip())
        content.append(self._lead(self._buf[:keep]))
        self._buf = self._buf[keep:]
        return False
