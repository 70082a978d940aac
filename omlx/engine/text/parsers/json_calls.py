"""Reading tool calls written as JSON objects (Hermes, Llama-3, Mistral's list form)."""

from __future__ import annotations

import json
from typing import Any

# (name, arguments as JSON text)
RawCall = tuple[str, str]

_DECODER = json.JSONDecoder()


def call_from_object(obj: Any, *, require_arguments: bool) -> RawCall | None:
    """`{"name": .., "arguments"|"parameters": {..}}`, also OpenAI's `{"function": {..}}`."""
    if not isinstance(obj, dict):
        return None
    if isinstance(obj.get("function"), dict):
        obj = obj["function"]
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        return None
    key = "arguments" if "arguments" in obj else "parameters" if "parameters" in obj else None
    if key is None:
        if require_arguments:
            return None
        arguments: Any = {}
    else:
        arguments = obj[key]
    if isinstance(arguments, str):
        # Some models write the arguments object as a JSON string.
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return None
    if not isinstance(arguments, dict):
        return None
    return name, json.dumps(arguments, ensure_ascii=False)


def parse_json_calls(
    text: str, *, require_arguments: bool = False, separators: str = ";,"
) -> list[RawCall] | None:
    """One or more JSON call objects (or lists of them); None unless all of `text` is calls."""
    calls: list[RawCall] = []
    pos, end = 0, len(text)
    while True:
        while pos < end and (text[pos].isspace() or text[pos] in separators):
            pos += 1
        if pos >= end:
            break
        try:
            value, pos = _DECODER.raw_decode(text, pos)
        except json.JSONDecodeError:
            return None
        for obj in value if isinstance(value, list) else [value]:
            call = call_from_object(obj, require_arguments=require_arguments)
            if call is None:
                return None
            calls.append(call)
    return calls or None
