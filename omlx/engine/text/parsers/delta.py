"""The parser contract: what one step of detokenized text becomes after parsing."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

from omlx.engine.api import ToolCall


@dataclass(slots=True)
class ParsedDelta:
    """Answer text, thinking text and completed tool calls released by one feed/finish."""

    content: str = ""
    reasoning: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)

    @property
    def is_empty(self) -> bool:
        return not (self.content or self.reasoning or self.tool_calls)


class OutputParser(Protocol):
    def feed(self, text: str) -> ParsedDelta:
        """Parse newly detokenized text (any split, even mid-tag); returns what is now safe."""
        ...

    def finish(self) -> ParsedDelta:
        """Flush at the end of generation: held text is released, open markup resolved."""
        ...


def new_tool_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def make_tool_call(name: str, arguments_json: str) -> ToolCall:
    return ToolCall(id=new_tool_call_id(), name=name, arguments=arguments_json)


def partial_marker_len(text: str, markers: Iterable[str]) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of a marker.

    That suffix must be held back: the next chunk may complete the marker.
    """
    best = 0
    for marker in markers:
        for n in range(min(len(marker) - 1, len(text)), best, -1):
            if text.endswith(marker[:n]):
                best = n
                break
    return best


def find_first(text: str, markers: Iterable[str]) -> tuple[int, str] | None:
    """Earliest full occurrence of any marker (longest marker wins a tie)."""
    found: tuple[int, str] | None = None
    for marker in markers:
        i = text.find(marker)
        if i < 0:
            continue
        if found is None or i < found[0] or (i == found[0] and len(marker) > len(found[1])):
            found = (i, marker)
    return found
