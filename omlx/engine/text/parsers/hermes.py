"""Hermes / Qwen tool calls: `<tool_call>{"name": .., "arguments": {..}}</tool_call>`."""

from __future__ import annotations

from omlx.engine.text.parsers.json_calls import RawCall, parse_json_calls
from omlx.engine.text.parsers.tool_stream import Span, ToolFormat


def parse(start: str, body: str) -> list[RawCall] | None:
    return parse_json_calls(body, separators="")


FORMAT = ToolFormat(
    name="hermes", spans=(Span("<tool_call>", "</tool_call>"),), parse=parse, json_body=True
)
