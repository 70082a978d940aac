"""Qwen3-Coder XML tool calls: `<tool_call><function=NAME><parameter=P>v</parameter></function>`."""

from __future__ import annotations

import json
import re
from typing import Any

from omlx.engine.text.parsers.json_calls import RawCall
from omlx.engine.text.parsers.tool_stream import Span, ToolFormat

_FUNCTION = re.compile(r"<function=([^>\n]+)>(.*?)</function>", re.DOTALL)
_PARAM_OPEN = "<parameter="
_PARAM_CLOSE = "</parameter>"


def _value(raw: str) -> Any:
    # The template writes `<parameter=p>\nvalue\n</parameter>`: drop exactly that framing.
    if raw.startswith("\n"):
        raw = raw[1:]
    if raw.endswith("\n"):
        raw = raw[:-1]
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw


def _parameters(body: str) -> dict[str, Any] | None:
    pieces = body.split(_PARAM_OPEN)
    if pieces[0].strip():
        return None
    arguments: dict[str, Any] = {}
    for piece in pieces[1:]:
        name, sep, raw = piece.partition(">")
        if not sep or not name.strip() or "\n" in name:
            return None
        stripped = raw.rstrip()
        # Models sometimes drop the last `</parameter>`; the next tag still ends the value.
        if stripped.endswith(_PARAM_CLOSE):
            raw = raw[: len(stripped) - len(_PARAM_CLOSE)]
        elif _PARAM_CLOSE in raw:
            return None
        arguments[name.strip()] = _value(raw)
    return arguments


def parse(start: str, body: str) -> list[RawCall] | None:
    text = body if start == "<tool_call>" else f"<function={body}</function>"
    calls: list[RawCall] = []
    pos = 0
    for match in _FUNCTION.finditer(text):
        if text[pos : match.start()].strip():
            return None
        pos = match.end()
        arguments = _parameters(match.group(2))
        if arguments is None:
            return None
        calls.append((match.group(1).strip(), json.dumps(arguments, ensure_ascii=False)))
    if text[pos:].strip():
        return None
    return calls or None


FORMAT = ToolFormat(
    name="qwen3_coder",
    # Some outputs skip the `<tool_call>` wrapper and open with `<function=` directly.
    spans=(Span("<tool_call>", "</tool_call>"), Span("<function=", "</function>")),
    parse=parse,
)
