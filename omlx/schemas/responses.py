"""OpenAI Responses API wire types (msgspec Structs).

Input items are kept as plain dicts: the item union is wide and open-ended, and the
server converts the kinds it understands with errors naming the item. Responses
mirror OpenAI's shape, including fields that must be present as `null`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from msgspec import Meta, Struct, field


class ReasoningConfig(Struct, kw_only=True):
    effort: str | None = None
    summary: str | None = None


class ResponsesRequest(Struct, kw_only=True):
    model: str = ""
    input: str | list[dict[str, Any]]
    instructions: str | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    previous_response_id: str | None = None
    max_output_tokens: Annotated[int, Meta(ge=1)] | None = None
    temperature: Annotated[float, Meta(ge=0, le=2)] | None = None
    top_p: Annotated[float, Meta(ge=0, le=1)] | None = None
    stream: bool = False
    store: bool = True
    parallel_tool_calls: bool = True
    reasoning: ReasoningConfig | None = None
    metadata: dict[str, str] | None = None
    user: str | None = None
    # {"format": {"type": "text" | "json_object" | "json_schema", "name", "schema", "strict"}}
    text: dict[str, Any] | None = None


class OutputText(Struct, kw_only=True, tag_field="type", tag="output_text"):
    text: str
    annotations: list[Any] = []
    logprobs: list[Any] = []


class ReasoningText(Struct, kw_only=True, tag_field="type", tag="reasoning_text"):
    text: str


class MessageItem(Struct, kw_only=True, tag_field="type", tag="message"):
    id: str
    status: Literal["in_progress", "completed", "incomplete"]
    role: Literal["assistant"] = "assistant"
    content: list[OutputText]


class FunctionCallItem(Struct, kw_only=True, tag_field="type", tag="function_call"):
    id: str
    call_id: str
    name: str
    arguments: str
    status: Literal["in_progress", "completed", "incomplete"]


class ReasoningItem(Struct, kw_only=True, tag_field="type", tag="reasoning"):
    id: str
    summary: list[Any]
    content: list[ReasoningText]
    status: Literal["in_progress", "completed", "incomplete"] | None = None


OutputItem = MessageItem | FunctionCallItem | ReasoningItem


class InputTokensDetails(Struct, kw_only=True):
    cached_tokens: int = 0


class OutputTokensDetails(Struct, kw_only=True):
    reasoning_tokens: int = 0


class ResponseUsage(Struct, kw_only=True):
    input_tokens: int
    input_tokens_details: InputTokensDetails
    output_tokens: int
    output_tokens_details: OutputTokensDetails
    total_tokens: int


class ResponseError(Struct, kw_only=True):
    code: str
    message: str


class IncompleteDetails(Struct, kw_only=True):
    reason: str


class ResponseObject(Struct, kw_only=True):
    id: str
    object: Literal["response"] = "response"
    created_at: int
    status: Literal["in_progress", "completed", "incomplete", "failed"]
    error: ResponseError | None = None
    incomplete_details: IncompleteDetails | None = None
    instructions: str | None = None
    max_output_tokens: int | None = None
    model: str
    output: list[OutputItem]
    parallel_tool_calls: bool = True
    previous_response_id: str | None = None
    reasoning: ReasoningConfig = field(default_factory=ReasoningConfig)
    store: bool = True
    temperature: float | None = None
    text: dict[str, Any] = field(default_factory=lambda: {"format": {"type": "text"}})
    tool_choice: str | dict[str, Any] = "auto"
    tools: list[dict[str, Any]] = []
    top_p: float | None = None
    truncation: str = "disabled"
    usage: ResponseUsage | None = None
    user: str | None = None
    metadata: dict[str, str] = {}
