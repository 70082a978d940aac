"""Anthropic Messages API wire types (msgspec Structs).

Requests ignore unknown fields (clients send betas and metadata we do not need);
responses mirror Anthropic's shape, including `stop_sequence: null`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from msgspec import Meta, Struct

# ---------------------------------------------------------------- request blocks


class ImageSource(Struct, kw_only=True):
    type: Literal["base64", "url"]
    media_type: str | None = None
    data: str | None = None
    url: str | None = None


class TextBlock(Struct, kw_only=True, tag_field="type", tag="text", omit_defaults=True):
    text: str
    cache_control: dict[str, Any] | None = None
    citations: list[dict[str, Any]] | None = None


class ImageBlock(Struct, kw_only=True, tag_field="type", tag="image"):
    source: ImageSource
    cache_control: dict[str, Any] | None = None


class DocumentBlock(Struct, kw_only=True, tag_field="type", tag="document"):
    source: dict[str, Any]
    title: str | None = None
    cache_control: dict[str, Any] | None = None


class ToolUseBlock(Struct, kw_only=True, tag_field="type", tag="tool_use", omit_defaults=True):
    id: str
    name: str
    input: dict[str, Any]
    cache_control: dict[str, Any] | None = None


class ToolResultBlock(Struct, kw_only=True, tag_field="type", tag="tool_result"):
    tool_use_id: str
    content: str | list[TextBlock | ImageBlock | DocumentBlock] | None = None
    is_error: bool = False
    cache_control: dict[str, Any] | None = None


class ThinkingBlock(Struct, kw_only=True, tag_field="type", tag="thinking"):
    thinking: str
    signature: str = ""


class RedactedThinkingBlock(Struct, kw_only=True, tag_field="type", tag="redacted_thinking"):
    data: str


ContentBlock = (
    TextBlock
    | ImageBlock
    | DocumentBlock
    | ToolUseBlock
    | ToolResultBlock
    | ThinkingBlock
    | RedactedThinkingBlock
)


class MessageParam(Struct, kw_only=True):
    # "system" mid-conversation: Claude Code sends it; the template decides how it renders.
    role: Literal["user", "assistant", "system"]
    content: str | list[ContentBlock]


class ToolDef(Struct, kw_only=True):
    name: str
    description: str | None = None
    input_schema: dict[str, Any] | None = None
    # Custom tools have no type (or "custom"); server tools carry a versioned type.
    type: str | None = None
    cache_control: dict[str, Any] | None = None


class ToolChoice(Struct, kw_only=True):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool | None = None


class ThinkingConfig(Struct, kw_only=True):
    type: Literal["enabled", "disabled", "adaptive"]
    budget_tokens: Annotated[int, Meta(ge=1)] | None = None
    display: str | None = None


System = str | list[TextBlock]


class CountTokensRequest(Struct, kw_only=True):
    model: str
    messages: list[MessageParam]
    system: System | None = None
    tools: list[ToolDef] | None = None
    tool_choice: ToolChoice | None = None
    thinking: ThinkingConfig | None = None


class MessagesRequest(CountTokensRequest, kw_only=True):
    max_tokens: Annotated[int, Meta(ge=1)]
    stop_sequences: list[str] | None = None
    stream: bool = False
    temperature: Annotated[float, Meta(ge=0, le=1)] | None = None
    top_p: Annotated[float, Meta(ge=0, le=1)] | None = None
    top_k: Annotated[int, Meta(ge=0)] | None = None
    metadata: dict[str, Any] | None = None


# ---------------------------------------------------------------- responses


class Usage(Struct, kw_only=True):
    input_tokens: int
    output_tokens: int
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0


class OutText(Struct, kw_only=True, tag_field="type", tag="text"):
    text: str


class OutThinking(Struct, kw_only=True, tag_field="type", tag="thinking"):
    thinking: str
    signature: str


class OutToolUse(Struct, kw_only=True, tag_field="type", tag="tool_use"):
    id: str
    name: str
    input: dict[str, Any]


OutBlock = OutText | OutThinking | OutToolUse

StopReason = Literal["end_turn", "max_tokens", "stop_sequence", "tool_use", "refusal"]


class MessageResponse(Struct, kw_only=True, tag_field="type", tag="message"):
    id: str
    role: Literal["assistant"] = "assistant"
    model: str
    content: list[OutBlock]
    stop_reason: StopReason | None
    stop_sequence: str | None
    usage: Usage


class CountTokensResponse(Struct, kw_only=True):
    input_tokens: int


class ApiErrorDetail(Struct, kw_only=True):
    type: str
    message: str


class ApiError(Struct, kw_only=True, tag_field="type", tag="error"):
    """Anthropic's error body: {"type": "error", "error": {"type", "message"}}."""

    error: ApiErrorDetail
