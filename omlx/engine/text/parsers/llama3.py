"""Llama-3 JSON tool calls: `<|python_tag|>{..}` or a bare `{"name": .., "parameters": {..}}`."""

from __future__ import annotations

from omlx.engine.text.parsers.json_calls import RawCall, parse_json_calls
from omlx.engine.text.parsers.tool_stream import Span, ToolFormat

_END_TOKENS = ("<|eom_id|>", "<|eot_id|>")


def parse(start: str, body: str) -> list[RawCall] | None:
    body = body.strip()
    for token in _END_TOKENS:
        body = body.removesuffix(token)
    # A bare message must name its arguments, so an ordinary JSON answer stays content.
    return parse_json_calls(body, require_arguments=True)


FORMAT = ToolFormat(
    name="llama3",
    spans=(Span("<|python_tag|>", None),),
    parse=parse,
    bare_json=True,
)
