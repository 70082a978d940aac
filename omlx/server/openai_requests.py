"""OpenAI request bodies → the engine's `GenerationRequest` (validation the Structs can't do)."""

from __future__ import annotations

import uuid
from typing import Any

import msgspec

from omlx.engine.api import (
    ChatMessage,
    GenerationRequest,
    RequestId,
    ResponseFormat,
    SamplingParams,
)
from omlx.errors import InvalidRequest
from omlx.schemas.openai import (
    ChatCompletionRequest,
    CompletionRequest,
    Message,
    SamplingFields,
)
from omlx.schemas.openai import ResponseFormat as WireResponseFormat
from omlx.settings import Settings


def new_request_id(prefix: str) -> RequestId:
    return RequestId(f"{prefix}-{uuid.uuid4().hex[:24]}")


def resolve_model(name: str, settings: Settings) -> str:
    """The requested model, else the configured default; "" lets the pool choose its own."""
    return name or settings.engine.default_model


def _check_common(body: SamplingFields) -> None:
    if body.n != 1:
        raise InvalidRequest(f"only n=1 is supported, got n={body.n}", param="n")


def _stop_list(stop: str | list[str] | None) -> list[str]:
    if stop is None:
        return []
    items = [stop] if isinstance(stop, str) else list(stop)
    if any(s == "" for s in items):
        raise InvalidRequest("stop strings must not be empty", param="stop")
    return items


def _logit_bias(bias: dict[str, float] | None) -> dict[int, float]:
    out: dict[int, float] = {}
    for key, value in (bias or {}).items():
        try:
            token_id = int(key)
        except ValueError:
            raise InvalidRequest(
                f"logit_bias keys must be token ids, got {key!r}", param="logit_bias"
            ) from None
        if token_id < 0 or not -100 <= value <= 100:
            raise InvalidRequest(
                f"logit_bias entry {key}: {value} is out of range", param="logit_bias"
            )
        out[token_id] = value
    return out


def sampling_params(body: SamplingFields, *, logprobs: bool, top_logprobs: int) -> SamplingParams:
    """Fields the body leaves unset stay None: the engine fills them from the model."""
    defaults = SamplingParams()

    def pick(value: Any, default: Any) -> Any:
        return default if value is None else value

    top_k = body.top_k
    return SamplingParams(
        temperature=body.temperature,
        top_p=body.top_p,
        top_k=0 if top_k is not None and top_k < 0 else top_k,  # -1 is "off" in vLLM's dialect
        min_p=body.min_p,
        repetition_penalty=body.repetition_penalty,
        presence_penalty=pick(body.presence_penalty, defaults.presence_penalty),
        frequency_penalty=pick(body.frequency_penalty, defaults.frequency_penalty),
        seed=body.seed,
        logit_bias=_logit_bias(body.logit_bias),
        logprobs=logprobs,
        top_logprobs=top_logprobs,
    )


def response_format(wire: WireResponseFormat | None) -> ResponseFormat | None:
    """OpenAI's `{"type": "json_schema", "json_schema": {"name", "schema", "strict"}}`."""
    if wire is None or wire.type == "text":
        return None
    if wire.type == "json_object":
        return ResponseFormat("json_object")
    spec = wire.json_schema
    if not isinstance(spec, dict) or not isinstance(spec.get("schema"), dict):
        raise InvalidRequest(
            "response_format json_schema needs json_schema.schema (a JSON Schema object)",
            param="response_format",
        )
    return structured_format("json_schema", spec["schema"], spec.get("name"))


def structured_format(kind: str, schema: Any, name: Any) -> ResponseFormat:
    """A JSON Schema response format; every schema is enforced, strict or not."""
    if not isinstance(schema, dict):
        raise InvalidRequest("the JSON schema must be an object", param="response_format")
    return ResponseFormat(kind, json_schema=schema, name=name if isinstance(name, str) else None)


def _check_message(i: int, message: Message) -> None:
    """OpenAI's rules: content on every turn but an assistant's tool call, a tool result
    names the call it answers."""
    content = message.content
    is_empty = content is None or (isinstance(content, list) and not content)
    if is_empty and not (message.role == "assistant" and message.tool_calls):
        what = "null or missing" if content is None else "an empty list"
        raise InvalidRequest(
            f"messages[{i}].content is {what}: a {message.role} message needs text or parts",
            param=f"messages[{i}].content",
        )
    if message.role == "tool" and not message.tool_call_id:
        raise InvalidRequest(
            f"messages[{i}] is a tool result without tool_call_id",
            param=f"messages[{i}].tool_call_id",
        )


def _chat_message(message: Message) -> ChatMessage:
    content: str | list[dict[str, Any]] | None
    if isinstance(message.content, list):
        content = [msgspec.to_builtins(part) for part in message.content]
    else:
        content = message.content
    tool_calls = (
        [msgspec.to_builtins(c) for c in message.tool_calls] if message.tool_calls else None
    )
    return ChatMessage(
        role=message.role,
        content=content,
        name=message.name,
        tool_calls=tool_calls,
        tool_call_id=message.tool_call_id,
        reasoning_content=message.reasoning_content,
    )


def chat_generation_request(
    body: ChatCompletionRequest, settings: Settings, request_id: RequestId
) -> GenerationRequest:
    _check_common(body)
    if not body.messages:
        raise InvalidRequest("messages must contain at least one message", param="messages")
    if body.top_logprobs and not body.logprobs:
        raise InvalidRequest("top_logprobs requires logprobs=true", param="top_logprobs")
    for i, message in enumerate(body.messages):
        _check_message(i, message)
    max_tokens = body.max_completion_tokens or body.max_tokens
    tool_choice = body.tool_choice
    return GenerationRequest(
        request_id=request_id,
        model=resolve_model(body.model, settings),
        messages=[_chat_message(m) for m in body.messages],
        max_tokens=max_tokens,  # unset: the engine fits its default to the room left
        stop=_stop_list(body.stop),
        sampling=sampling_params(body, logprobs=body.logprobs, top_logprobs=body.top_logprobs or 0),
        tools=[msgspec.to_builtins(t) for t in body.tools] if body.tools else None,
        tool_choice=msgspec.to_builtins(tool_choice) if tool_choice is not None else None,
        chat_template_kwargs=dict(body.chat_template_kwargs or {}),
        response_format=response_format(body.response_format),
        parallel_tool_calls=body.parallel_tool_calls is not False,
    )


def completion_prompt(prompt: str | list[Any]) -> tuple[str | None, list[int] | None]:
    """A string, a list of one string, or token ids (flat or a list of one list)."""
    if isinstance(prompt, str):
        return prompt, None
    if len(prompt) == 1 and isinstance(prompt[0], str):
        return prompt[0], None
    if len(prompt) == 1 and isinstance(prompt[0], list):
        prompt = prompt[0]
    if prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        if min(prompt) < 0:
            raise InvalidRequest("prompt token ids must be >= 0", param="prompt")
        return None, list(prompt)
    if not prompt:
        raise InvalidRequest("prompt must not be empty", param="prompt")
    raise InvalidRequest(
        "prompt must be a string, a list of one string, or a list of token ids "
        "(batches of several prompts are not supported)",
        param="prompt",
    )


def completion_generation_request(
    body: CompletionRequest, settings: Settings, request_id: RequestId
) -> GenerationRequest:
    _check_common(body)
    if body.best_of not in (None, 1):
        raise InvalidRequest("only best_of=1 is supported", param="best_of")
    if body.suffix:
        raise InvalidRequest("suffix is not supported", param="suffix")
    text, token_ids = completion_prompt(body.prompt)
    if body.echo and text is None:
        raise InvalidRequest("echo needs a text prompt, not token ids", param="echo")
    return GenerationRequest(
        request_id=request_id,
        model=resolve_model(body.model, settings),
        prompt=text,
        prompt_token_ids=token_ids,
        max_tokens=body.max_tokens,
        stop=_stop_list(body.stop),
        sampling=sampling_params(
            body, logprobs=body.logprobs is not None, top_logprobs=body.logprobs or 0
        ),
        response_format=response_format(body.response_format),
    )
