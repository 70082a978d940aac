"""Editing JSON config files as text: comments, trailing commas and layout survive.

Tools read JSONC or JSON5 (OpenCode's `opencode.jsonc`, OpenClaw's `openclaw.json`), so a
load-modify-dump round trip would drop the user's comments. Instead the text is scanned
once into spans, and a change replaces one value's span or inserts one member before an
object's closing brace; every other byte stays where it was.

Accepted beyond JSON: `//` and `/* */` comments, trailing commas, unquoted keys and
single-quoted strings (the JSON5 forms these configs use). Anything else is malformed.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from omlx.integrations.files import ConfigError

_WS = " \t\r\n\ufeff"
_BARE = re.compile(r"[A-Za-z0-9_$+\-.]+")
_LITERALS = {"true": True, "false": False, "null": None}


@dataclass(slots=True)
class Node:
    start: int
    end: int
    value: Any = None
    # Objects only: key -> (value node, key start); order kept in `keys`.
    members: dict[str, Node] = field(default_factory=dict)
    keys: list[str] = field(default_factory=list)
    is_object: bool = False
    comma_after_last: bool = False


class _Parser:
    def __init__(self, text: str, where: str) -> None:
        self.text, self.where, self.pos = text, where, 0

    def fail(self, why: str) -> ConfigError:
        line = self.text.count("\n", 0, self.pos) + 1
        return ConfigError(f"{self.where}: not valid JSON ({why} at line {line}); left untouched")

    def skip(self) -> None:
        text, n = self.text, len(self.text)
        while self.pos < n:
            c = text[self.pos]
            if c in _WS:
                self.pos += 1
            elif text.startswith("//", self.pos):
                end = text.find("\n", self.pos)
                self.pos = n if end < 0 else end + 1
            elif text.startswith("/*", self.pos):
                end = text.find("*/", self.pos + 2)
                if end < 0:
                    raise self.fail("unclosed comment")
                self.pos = end + 2
            else:
                return

    def peek(self) -> str:
        self.skip()
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def value(self) -> Node:
        c = self.peek()
        if c == "{":
            return self.obj()
        if c == "[":
            return self.arr()
        if c and c in "\"'":
            start = self.pos
            text = self.string()
            return Node(start, self.pos, text)
        start = self.pos
        m = _BARE.match(self.text, self.pos)
        if not m:
            raise self.fail(f"unexpected {c!r}" if c else "unexpected end")
        self.pos = m.end()
        word = m.group()
        if word in _LITERALS:
            return Node(start, self.pos, _LITERALS[word])
        try:
            return Node(start, self.pos, json.loads(word))
        except json.JSONDecodeError:
            raise self.fail(f"bad value {word!r}") from None

    def string(self) -> str:
        quote, start = self.text[self.pos], self.pos
        i = start + 1
        while i < len(self.text):
            c = self.text[i]
            if c == "\\":
                i += 2
                continue
            if c == quote:
                self.pos = i + 1
                body = self.text[start + 1 : i]
                if quote == "'":
                    body = body.replace("\\'", "'").replace('"', '\\"')
                try:
                    return json.loads(f'"{body}"')
                except json.JSONDecodeError:
                    raise self.fail("bad string") from None
            if c == "\n":
                break
            i += 1
        raise self.fail("unclosed string")

    def key(self) -> str:
        if (c := self.peek()) and c in "\"'":
            return self.string()
        m = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*").match(self.text, self.pos)
        if not m:
            raise self.fail("expected a key")
        self.pos = m.end()
        return m.group()

    def obj(self) -> Node:
        node = Node(self.pos, 0, is_object=True)
        self.pos += 1
        while True:
            c = self.peek()
            if c == "}":
                self.pos += 1
                node.end = self.pos
                node.value = {k: node.members[k].value for k in node.keys}
                return node
            k = self.key()
            if self.peek() != ":":
                raise self.fail("expected ':'")
            self.pos += 1
            child = self.value()
            if k not in node.members:
                node.keys.append(k)
            node.members[k] = child
            node.comma_after_last = self.peek() == ","
            if node.comma_after_last:
                self.pos += 1
            elif self.peek() != "}":
                raise self.fail("expected ',' or '}'")

    def arr(self) -> Node:
        node = Node(self.pos, 0)
        self.pos += 1
        items: list[Any] = []
        while True:
            if self.peek() == "]":
                self.pos += 1
                node.end, node.value = self.pos, items
                return node
            items.append(self.value().value)
            if self.peek() == ",":
                self.pos += 1
            elif self.peek() != "]":
                raise self.fail("expected ',' or ']'")


def _parse(text: str, where: str) -> Node:
    parser = _Parser(text, where)
    root = parser.value()
    if parser.peek():
        raise parser.fail("text after the document")
    return root


def loads(text: str, where: str = "config") -> Any:
    """Parse JSON/JSONC/JSON5-lite text; ConfigError (naming `where`) when malformed."""
    return _parse(text, where).value


def _indent_unit(text: str) -> str:
    m = re.search(r"\n([ \t]+)\S", text)
    return m.group(1) if m else "  "


def _line_indent(text: str, pos: int) -> str:
    line_start = text.rfind("\n", 0, pos) + 1
    m = re.match(r"[ \t]*", text[line_start:])
    return m.group() if m else ""


def _render(value: Any, indent: str, unit: str) -> str:
    return json.dumps(value, indent=unit, ensure_ascii=False).replace("\n", "\n" + indent)


def set_path(text: str | None, path: list[str], value: Any, where: str = "config") -> str:
    """`text` with the member at `path` set to `value` (objects created on the way).

    The new text is `text` itself when the member already holds an equal value.
    """
    if text is None or not text.strip():
        nested: Any = value
        for key in reversed(path):
            nested = {key: nested}
        return json.dumps(nested, indent=2) + "\n"
    node = _parse(text, where)
    unit = _indent_unit(text)
    walked: list[str] = []
    for depth, key in enumerate(path):
        if not node.is_object:
            shown = ".".join(walked) or "the top level"
            raise ConfigError(f"{where}: {shown} is not an object; left untouched")
        walked.append(key)
        child = node.members.get(key)
        if child is None:
            rest: Any = value
            for k in reversed(path[depth + 1 :]):
                rest = {k: rest}
            return _insert(text, node, key, rest, unit)
        node = child
    if node.value == value:
        return text
    indent = _line_indent(text, node.start)
    return text[: node.start] + _render(value, indent, unit) + text[node.end :]


def _insert(text: str, obj: Node, key: str, value: Any, unit: str) -> str:
    close = obj.end - 1  # the closing brace
    if obj.keys:
        first = obj.members[obj.keys[0]]
        member_indent = _line_indent(text, first.start)
        if member_indent == _line_indent(text, obj.start) and "\n" not in text[obj.start : close]:
            member_indent = _line_indent(text, obj.start) + unit
    else:
        member_indent = _line_indent(text, obj.start) + unit
    member = f"{json.dumps(key, ensure_ascii=False)}: {_render(value, member_indent, unit)}"
    # Insert after the last non-blank text before the brace (a comment stays on its line).
    at = close
    while at > obj.start + 1 and text[at - 1] in _WS:
        at -= 1
    tail = text[at:close]
    closing_indent = _line_indent(text, close) if "\n" in tail else _line_indent(text, obj.start)
    new_tail = f"\n{member_indent}{member}\n{closing_indent}"
    if obj.keys and not obj.comma_after_last:
        last = obj.members[obj.keys[-1]]
        head = text[: last.end] + "," + text[last.end : at]
    else:
        head = text[:at]
    return head + new_tail + text[close:]
