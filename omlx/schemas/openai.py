"""OpenAI wire types: chat completions, completions, models, errors (msgspec Structs).

Requests ignore unknown fields so newer clients keep working; responses mirror
OpenAI's shape exactly, including fields that must be present as `null`. Fields
typed `... | UnsetType = UNSET` are omitted from the JSON when unset.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import UNSET, Meta, Struct, UnsetType

Role = Literal["system", "user", "assistant", "tool", "developer", "function"]

# ---------------------------------------------------------------- requests


class ImageUrl(Struct, kw_only=True):
    url: str
    detail: str | None = None


class TextPart(Struct, kw_only=True, tag_field="type", tag="text"):
    text: str


class ImageUrlPart(Struct, kw_only=True, tag_field="type", tag="image_url"):
    image_url: ImageUrl


class InputAudioPart(Struct, kw_only=True, tag_field="type", tag="input_audio"):
    input_audio: dict[str, Any]


class FilePart(Struct, kw_only=True, tag_field="type", tag="file"):
    file: dict[str, Any]


class RefusalPart(Struct, kw_only=True, tag_field="type", tag="refusal"):
    refusal: str


ContentPart = TextPart | ImageUrlPart | InputAudioPart | FilePart | RefusalPart


class FunctionCall(Struct, kw_only=True):
    name: str
    arguments: str = ""


class MessageToolCall(Struct, kw_only=True):
    id: str = ""
    type: Literal["function"] = "function"
    function: FunctionCall


class Message(Struct, kw_only=True):
    role: Role
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[MessageToolCall] | None = None
    tool_call_id: str | None = None
    # Returned by reasoning models and sent back by some clients; kept for templates.
    reasoning_content: str | None = None


class FunctionDef(Struct, kw_only=True):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class Tool(Struct, kw_only=True):
    type: Literal["function"] = "function"
    function: FunctionDef


class NamedToolChoiceFunction(Struct, kw_only=True):
    name: str


class NamedToolChoice(Struct, kw_only=True):
    type: Literal["function"] = "function"
    function: NamedToolChoiceFunction


ToolChoice = Literal["none", "auto", "required"] | NamedToolChoice


class StreamOptions(Struct, kw_only=True):
    include_usage: bool = False


class ResponseFormat(Struct, kw_only=True):
    type: Literal["text", "json_object", "json_schema"] = "text"
    json_schema: dict[str, Any] | None = None


PositiveInt = Annotated[int, Meta(ge=1)]
Temperature = Annotated[float, Meta(ge=0, le=2)]
Unit = Annotated[float, Meta(ge=0, le=1)]
Penalty = Annotated[float, Meta(ge=-2, le=2)]


class SamplingFields(Struct, kw_only=True):
    """Sampling knobs shared by chat and text completions (OpenAI + common extensions)."""

    model: str = ""
    max_tokens: PositiveInt | None = None
    temperature: Temperature | None = None
    top_p: Unit | None = None
    top_k: Annotated[int, Meta(ge=-1)] | None = None
    min_p: Unit | None = None
    repetition_penalty: Annotated[float, Meta(gt=0)] | None = None
    presence_penalty: Penalty | None = None
    frequency_penalty: Penalty | None = None
    seed: int | None = None
    logit_bias: dict[str, float] | None = None
    stop: str | list[str] | None = None
    n: int = 1
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: str | None = None


class ChatCompletionRequest(SamplingFields, kw_only=True):
    messages: list[Message]
    max_completion_tokens: PositiveInt | None = None
    logprobs: bool = False
    top_logprobs: Annotated[int, Meta(ge=0, le=20)] | None = None
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = None
    response_format: ResponseFormat | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    reasoning_effort: str | None = None


class CompletionRequest(SamplingFields, kw_only=True):
    # A string, a list of one string, or token ids; msgspec allows one array type per
    # union, so the route checks the list's items.
    prompt: str | list[Any]
    echo: bool = False
    logprobs: Annotated[int, Meta(ge=0, le=20)] | None = None
    suffix: str | None = None
    best_of: int | None = None
    response_format: ResponseFormat | None = None


# ---------------------------------------------------------------- responses


class PromptTokensDetails(Struct, kw_only=True):
    cached_tokens: int = 0


class Usage(Struct, kw_only=True):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails = msgspec.field(default_factory=PromptTokensDetails)


class ToolCallFunction(Struct, kw_only=True):
    name: str
    arguments: str


class ToolCall(Struct, kw_only=True):
    id: str
    type: str = "function"
    function: ToolCallFunction


class TopLogprob(Struct, kw_only=True):
    token: str
    logprob: float
    bytes: list[int] | None = None


class TokenLogprobEntry(Struct, kw_only=True):
    token: str
    logprob: float
    bytes: list[int] | None = None
    top_logprobs: list[TopLogprob] = msgspec.field(default_factory=list)


class ChoiceLogprobs(Struct, kw_only=True):
    content: list[TokenLogprobEntry] | None = None
    refusal: list[TokenLogprobEntry] | None = None


class AssistantMessage(Struct, kw_only=True):
    role: str = "assistant"
    content: str | None = None
    refusal: None = None
    tool_calls: list[ToolCall] | UnsetType = UNSET
    reasoning_content: str | UnsetType = UNSET


class ChatChoice(Struct, kw_only=True):
    index: int = 0
    message: AssistantMessage
    logprobs: ChoiceLogprobs | None = None
    finish_reason: str | None = None


class ChatCompletion(Struct, kw_only=True):
    id: str
    object: str = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage | None = None
    system_fingerprint: str | None = None


class DeltaToolCallFunction(Struct, kw_only=True):
    name: str | UnsetType = UNSET
    arguments: str = ""


class DeltaToolCall(Struct, kw_only=True):
    index: int
    id: str | UnsetType = UNSET
    type: str | UnsetType = UNSET
    function: DeltaToolCallFunction


class Delta(Struct, kw_only=True):
    role: str | UnsetType = UNSET
    content: str | UnsetType | None = UNSET
    reasoning_content: str | UnsetType = UNSET
    tool_calls: list[DeltaToolCall] | UnsetType = UNSET
    refusal: UnsetType | None = UNSET


class ChunkChoice(Struct, kw_only=True):
    index: int = 0
    delta: Delta
    logprobs: ChoiceLogprobs | None = None
    finish_reason: str | None = None


class ChatCompletionChunk(Struct, kw_only=True):
    id: str
    object: str = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChunkChoice]
    system_fingerprint: str | None = None
    # Present (as null until the last chunk) only when stream_options.include_usage.
    usage: Usage | UnsetType | None = UNSET


class CompletionLogprobs(Struct, kw_only=True):
    tokens: list[str] = msgspec.field(default_factory=list)
    # null for the first token of an echoed prompt (nothing precedes it), as OpenAI does
    token_logprobs: list[float | None] = msgspec.field(default_factory=list)
    top_logprobs: list[dict[str, float] | None] = msgspec.field(default_factory=list)
    text_offset: list[int] = msgspec.field(default_factory=list)


class CompletionChoice(Struct, kw_only=True):
    index: int = 0
    text: str
    logprobs: CompletionLogprobs | None = None
    finish_reason: str | None = None


class Completion(Struct, kw_only=True):
    id: str
    object: str = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage | UnsetType | None = UNSET
    system_fingerprint: str | None = None


class ModelCard(Struct, kw_only=True):
    id: str
    object: str = "model"
    created: int = 0
    owned_by: str = "omlx"
    # omlx extensions: what kind of model and whether it is in memory.
    type: str = "llm"
    status: Literal["loaded", "available"] = "available"
    pinned: bool = False
    # The context window, under the names clients probe for (vLLM's max_model_len).
    context_length: int | None = None
    max_model_len: int | None = None


class ModelList(Struct, kw_only=True):
    object: str = "list"
    data: list[ModelCard] = msgspec.field(default_factory=list)


class ErrorDetail(Struct, kw_only=True):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorBody(Struct, kw_only=True):
    error: ErrorDetail
