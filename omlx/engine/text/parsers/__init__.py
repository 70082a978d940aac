"""Streaming-safe reasoning and tool-call output parsers (pure Python, no MLX)."""

from __future__ import annotations

from omlx.engine.text.parsers.budget import ThinkingBudget
from omlx.engine.text.parsers.delta import OutputParser, ParsedDelta, new_tool_call_id
from omlx.engine.text.parsers.factory import (
    TOOL_FORMATS,
    detect_tool_format,
    has_reasoning,
    make_output_parser,
)
from omlx.engine.text.parsers.reasoning import prompt_ends_in_think

__all__ = [
    "TOOL_FORMATS",
    "OutputParser",
    "ParsedDelta",
    "ThinkingBudget",
    "detect_tool_format",
    "has_reasoning",
    "make_output_parser",
    "new_tool_call_id",
    "prompt_ends_in_think",
]
