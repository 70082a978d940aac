"""Choosing and composing the output parser for a model."""

from __future__ import annotations

from omlx.engine.text.parsers import hermes, llama3, mistral, qwen3_coder
from omlx.engine.text.parsers.delta import OutputParser, ParsedDelta
from omlx.engine.text.parsers.reasoning import THINK_OPEN, ThinkSplitter
from omlx.engine.text.parsers.tool_stream import ToolCallExtractor, ToolFormat

TOOL_FORMATS: dict[str, ToolFormat] = {
    fmt.name: fmt for fmt in (hermes.FORMAT, qwen3_coder.FORMAT, llama3.FORMAT, mistral.FORMAT)
}

# model_type -> tool format, for templates that do not show their markup.
_MODEL_TYPE_TOOLS = {
    "llama": "llama3",
    "mllama": "llama3",
    "mistral": "mistral",
    "mistral3": "mistral",
    "ministral": "mistral",
    "mixtral": "mistral",
}
_THINKING_MODEL_TYPES = {"qwen3", "qwen3_moe", "qwen3_next", "deepseek_v3", "glm4_moe"}


def detect_tool_format(chat_template: str | None, model_type: str | None) -> ToolFormat:
    """The model's tool-call format, from its template first, then its model_type."""
    template = chat_template or ""
    if "<function=" in template and "<parameter=" in template:
        return qwen3_coder.FORMAT
    if "[TOOL_CALLS]" in template:
        return mistral.FORMAT
    if "<tool_call>" in template:
        return hermes.FORMAT
    if "<|python_tag|>" in template or "<|eom_id|>" in template:
        return llama3.FORMAT
    name = _MODEL_TYPE_TOOLS.get((model_type or "").lower())
    # Hermes is the most common convention, and what generic templates ask for.
    return TOOL_FORMATS[name or "hermes"]


def has_reasoning(chat_template: str | None, model_type: str | None) -> bool:
    return THINK_OPEN in (chat_template or "") or (model_type or "").lower() in (
        _THINKING_MODEL_TYPES
    )


class _PassThrough:
    def feed(self, text: str) -> ParsedDelta:
        return ParsedDelta(content=text)

    def finish(self) -> ParsedDelta:
        return ParsedDelta()


class _Pipeline:
    """Reasoning split first; tool calls are looked for only in the content stream."""

    def __init__(self, think: ThinkSplitter | None, tools: ToolCallExtractor | None) -> None:
        self._think = think
        self._tools = tools

    def feed(self, text: str) -> ParsedDelta:
        reasoning, content = self._think.feed(text) if self._think else ("", text)
        if self._tools is None:
            return ParsedDelta(content=content, reasoning=reasoning)
        content, calls = self._tools.feed(content)
        return ParsedDelta(content=content, reasoning=reasoning, tool_calls=calls)

    def finish(self) -> ParsedDelta:
        reasoning, content = self._think.finish() if self._think else ("", "")
        if self._tools is None:
            return ParsedDelta(content=content, reasoning=reasoning)
        fed, calls = self._tools.feed(content)
        rest, more = self._tools.finish()
        return ParsedDelta(content=fed + rest, reasoning=reasoning, tool_calls=calls + more)


def make_output_parser(
    *,
    chat_template: str | None,
    model_type: str | None,
    tools_enabled: bool,
    thinking: bool | None,
    prompt_ends_in_think: bool = False,
    tool_format: str | None = None,
) -> OutputParser:
    """A fresh parser for one request.

    Args:
        thinking: the request's thinking switch (None = model default). Reasoning is
            parsed whenever the model can think, even if switched off, so stray
            `<think>` markup never reaches content.
        prompt_ends_in_think: the rendered prompt opened `<think>`, so output starts
            inside the reasoning block.
        tool_format: a TOOL_FORMATS name that overrides the detected one (the prompt
            taught it: omlx wrote the tools into a template that ignores them).
    """
    use_think = prompt_ends_in_think or bool(thinking) or has_reasoning(chat_template, model_type)
    think = ThinkSplitter(start_in_reasoning=prompt_ends_in_think) if use_think else None
    fmt = (
        TOOL_FORMATS[tool_format] if tool_format else detect_tool_format(chat_template, model_type)
    )
    tools = ToolCallExtractor(fmt) if tools_enabled else None
    if think is None and tools is None:
        return _PassThrough()
    return _Pipeline(think, tools)
