"""The output-parser seam: engineer F's `omlx.engine.text.parsers`, or a pass-through until then."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from omlx.engine.api import ToolCall


@dataclass(frozen=True, slots=True)
class PlainDelta:
    content: str = ""
    reasoning: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)


class ParsedDeltaLike(Protocol):
    content: str
    reasoning: str
    tool_calls: list[ToolCall]


class OutputParser(Protocol):
    def feed(self, text: str) -> ParsedDeltaLike: ...

    def finish(self) -> ParsedDeltaLike: ...


class PassThroughParser:
    """All text is content; used when no parser package is available."""

    def feed(self, text: str) -> PlainDelta:
        return PlainDelta(content=text)

    def finish(self) -> PlainDelta:
        return PlainDelta()


def make_parser(
    *,
    chat_template: str | None,
    model_type: str | None,
    tools_enabled: bool,
    thinking: bool | None,
    prompt_ends_in_think: bool,
) -> OutputParser:
    try:
        from omlx.engine.text.parsers import make_output_parser
    except ImportError:
        return PassThroughParser()
    return make_output_parser(
        chat_template=chat_template,
        model_type=model_type,
        tools_enabled=tools_enabled,
        thinking=thinking,
        prompt_ends_in_think=prompt_ends_in_think,
    )
