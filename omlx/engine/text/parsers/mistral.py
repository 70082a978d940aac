"""Mistral tool calls: `[TOOL_CALLS][{..}]` and the newer `[TOOL_CALLS]name[ARGS]{..}`."""

from __future__ import annotations

import json
import re

from omlx.engine.text.parsers.json_calls import RawCall, parse_json_calls
from omlx.engine.text.parsers.tool_stream import Span, ToolFormat

TOOL_CALLS = "[TOOL_CALLS]"
_HEADER = re.compile(r"\s*([^\s\[\]{}]+)\s*(?:\[CALL_ID\]\s*([A-Za-z0-9_-]+)\s*)?\[ARGS\]\s*")
_DECODER = json.JSONDecoder()


def _parse_header_calls(text: str) -> list[RawCall] | None:
    calls: list[RawCall] = []
    pos = 0
    while pos < len(text):
        match = _HEADER.match(text, pos)
        if match is None:
            return None
        try:
            arguments, pos = _DECODER.raw_decode(text, match.end())
        except json.JSONDecodeError:
            return None
        if not isinstance(arguments, dict):
            return None
        calls.append((match.group(1), json.dumps(arguments, ensure_ascii=False)))
        while pos < len(text) and text[pos].isspace():
            pos += 1
    return calls or None


def parse(start: str, body: str) -> list[RawCall] | None:
    # No end marker: the body runs to the end of output and may repeat [TOOL_CALLS].
    calls: list[RawCall] = []
    for part in body.removesuffix("</s>").split(TOOL_CALLS):
        part = part.strip()
        if not part:
            continue
        found = parse_json_calls(part) if part[0] in "[{" else _parse_header_calls(part)
        if found is None:
            return None
        calls.extend(found)
    return calls or None


FORMAT = ToolFormat(name="mistral", spans=(Span(TOOL_CALLS, None),), parse=parse)
