"""Anthropic Messages bodies → the engine's `GenerationRequest`; model aliases; token scaling."""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

from omlx.engine.api import ChatMessage, GenerationRequest, ModelInfo, RequestId, SamplingParams
from omlx.errors import InvalidRequest
from omlx.schemas import anthropic as an
from omlx.settings import Settings

_TIERS = ("opus", "sonnet", "haiku")


def resolve_model(name: str, settings: Settings, models: list[ModelInfo]) -> str:
    """The local model for a client's model name, first match wins: an alias named
    exactly, a model's id, an alias contained in the name (case-insensitive), then the
    default model for an empty name and, with `agents.claude_fallback`, for a name that
    starts with "claude" or is a tier (opus, sonnet, haiku). Anything else is returned
    as is, so the pool answers 404 for it."""
    aliases = settings.agents.model_aliases
    if name in aliases:
        return aliases[name]
    if any(m.id == name for m in models):
        return name
    lowered = name.lower()
    for key, target in aliases.items():
        if key.lower() in lowered:
            return target
    default = settings.engine.default_model
    # Claude Code asks for claude-* (and tier names) and cannot be told otherwise without
    # an alias: serve the default model then, unless that fallback is switched off.
    is_claude = lowered.startswith("claude") or lowered in _TIERS
    if default and (not name or (is_claude and settings.agents.claude_fallback)):
        return default
    if not name:
        raise InvalidRequest("no model given and no default model configured", param="model")
    return name


# A client may ask for scaling per request (`omlx launch claude` sets it through Claude
# Code's ANTHROPIC_CUSTOM_HEADERS); it wins over agents.context_window_tokens.
CONTEXT_WINDOW_HEADER = "x-omlx-context-window"


def context_window_override(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        window = int(value.strip())
    except ValueError:
        window = 0
    if window < 1:
        raise InvalidRequest(
            f"header {CONTEXT_WINDOW_HEADER} must be a positive token count, got {value!r}"
        )
    return window


class TokenScale:
    """Reported counts scaled by target context window / the model's real one, when the
    model's window is the smaller: the client then compacts when the real one fills."""

    def __init__(
        self,
        settings: Settings,
        model: str,
        models: list[ModelInfo],
        target_tokens: int | None = None,
    ) -> None:
        target = target_tokens or settings.agents.context_window_tokens
        real = next((m.context_length for m in models if m.id == model), None)
        self.factor = target / real if target and real and target > real else 1.0

    def __call__(self, num_tokens: int) -> int:
        if self.factor == 1.0:
            return num_tokens
        return math.ceil(num_tokens * self.factor)


def _text_of(blocks: str | list[an.TextBlock]) -> str:
    return blocks if isinstance(blocks, str) else "\n".join(b.text for b in blocks)


def _system_text(blocks: list[Any]) -> str:
    texts = [b.text for b in blocks if isinstance(b, an.TextBlock)]
    if len(texts) != len(blocks):
        raise InvalidRequest("a system message holds text blocks only", param="messages")
    return "\n".join(texts)


def _image_part(block: an.ImageBlock) -> dict[str, Any]:
    source = block.source
    if source.type == "base64":
        if not source.data or not source.media_type:
            raise InvalidRequest("a base64 image needs media_type and data")
        url = f"data:{source.media_type};base64,{source.data}"
    else:
        if not source.url:
            raise InvalidRequest("a url image needs a url")
        url = source.url
    return {"type": "image_url", "image_url": {"url": url}}


def _document_text(block: an.DocumentBlock) -> str:
    source = block.source
    if source.get("type") == "text" and isinstance(source.get("data"), str):
        return source["data"]
    if source.get("type") == "content" and isinstance(source.get("content"), str):
        return source["content"]
    raise InvalidRequest("only plain-text documents are supported (source.type 'text')")


def _parts(blocks: list[Any]) -> str | list[dict[str, Any]]:
    """Text, image and document blocks → a string, or OpenAI-style parts if images."""
    parts: list[dict[str, Any]] = []
    for block in blocks:
        if isinstance(block, an.TextBlock):
            parts.append({"type": "text", "text": block.text})
        elif isinstance(block, an.ImageBlock):
            parts.append(_image_part(block))
        elif isinstance(block, an.DocumentBlock):
            parts.append({"type": "text", "text": _document_text(block)})
    if all(p["type"] == "text" for p in parts):
        return "\n".join(p["text"] for p in parts)
    return parts


def _tool_result(block: an.ToolResultBlock) -> ChatMessage:
    content = block.content
    if content is None:
        text: str | list[dict[str, Any]] = ""
    elif isinstance(content, str):
        text = content
    else:
        text = _parts(content)
    if block.is_error and isinstance(text, str):
        text = f"Error: {text}"
    return ChatMessage(role="tool", content=text, tool_call_id=block.tool_use_id)


def _user_messages(blocks: list[Any]) -> list[ChatMessage]:
    """Tool results become tool messages; the other blocks one user message, in order."""
    out: list[ChatMessage] = []
    pending: list[Any] = []
    for block in blocks:
        if isinstance(block, an.ToolResultBlock):
            if pending:
                out.append(ChatMessage(role="user", content=_parts(pending)))
                pending = []
            out.append(_tool_result(block))
        elif isinstance(block, an.ToolUseBlock | an.ThinkingBlock | an.RedactedThinkingBlock):
            raise InvalidRequest(f"a user message cannot hold a {type(block).__name__} block")
        else:
            pending.append(block)
    if pending:
        out.append(ChatMessage(role="user", content=_parts(pending)))
    return out


def _assistant_message(blocks: list[Any]) -> ChatMessage:
    texts: list[str] = []
    thinking: list[str] = []
    calls: list[dict[str, Any]] = []
    for block in blocks:
        if isinstance(block, an.TextBlock):
            texts.append(block.text)
        elif isinstance(block, an.ThinkingBlock):
            thinking.append(block.thinking)
        elif isinstance(block, an.ToolUseBlock):
            arguments = json.dumps(block.input, ensure_ascii=False)
            calls.append(
                {
                    "id": block.id,
                    "type": "function",
                    "function": {"name": block.name, "arguments": arguments},
                }
            )
        elif not isinstance(block, an.RedactedThinkingBlock):
            raise InvalidRequest(f"an assistant message cannot hold a {type(block).__name__} block")
    return ChatMessage(
        role="assistant",
        content="".join(texts),
        tool_calls=calls or None,
        reasoning_content="\n".join(thinking) or None,
    )


def chat_messages(body: an.CountTokensRequest) -> list[ChatMessage]:
    if not body.messages:
        raise InvalidRequest("messages: at least one message is required", param="messages")
    out: list[ChatMessage] = []
    if body.system:
        out.append(ChatMessage(role="system", content=_text_of(body.system)))
    for message in body.messages:
        if isinstance(message.content, str):
            out.append(ChatMessage(role=message.role, content=message.content))
        elif message.role == "system":
            out.append(ChatMessage(role="system", content=_system_text(message.content)))
        elif message.role == "user":
            out.extend(_user_messages(message.content))
        else:
            out.append(_assistant_message(message.content))
    return out


def _tools(tools: list[an.ToolDef] | None) -> list[dict[str, Any]] | None:
    if not tools:
        return None
    return [
        {
            "type": "function",
            "function": {
                "name": tool.name,
                "description": tool.description or "",
                "parameters": tool.input_schema or {"type": "object", "properties": {}},
            },
        }
        for tool in tools
    ]


def _tool_choice(choice: an.ToolChoice | None) -> Any:
    if choice is None or choice.type == "auto":
        return None
    if choice.type == "any":
        return "required"
    if choice.type == "none":
        return "none"
    if not choice.name:
        raise InvalidRequest("tool_choice type 'tool' needs a name", param="tool_choice.name")
    return {"type": "function", "function": {"name": choice.name}}


def thinking_kwargs(thinking: an.ThinkingConfig | None) -> dict[str, Any]:
    """enabled → thinking on; disabled or absent → off; adaptive → the model's default."""
    if thinking is None or thinking.type == "disabled":
        return {"enable_thinking": False}
    if thinking.type == "enabled":
        return {"enable_thinking": True}
    return {}


def _thinking_budget(body: an.MessagesRequest) -> int | None:
    thinking = body.thinking
    if thinking is None or thinking.type != "enabled":
        return None
    if thinking.budget_tokens is None:
        raise InvalidRequest(
            "thinking.budget_tokens: required when thinking is enabled",
            param="thinking.budget_tokens",
        )
    if thinking.budget_tokens >= body.max_tokens:
        raise InvalidRequest(
            f"max_tokens ({body.max_tokens}) must be greater than thinking.budget_tokens "
            f"({thinking.budget_tokens})",
            param="thinking.budget_tokens",
        )
    return thinking.budget_tokens


def count_request(
    body: an.CountTokensRequest, model: str, request_id: RequestId
) -> GenerationRequest:
    """The request whose prompt count_tokens measures: the same template inputs as a message."""
    return GenerationRequest(
        request_id=request_id,
        model=model,
        messages=chat_messages(body),
        tools=_tools(body.tools),
        tool_choice=_tool_choice(body.tool_choice),
        chat_template_kwargs=thinking_kwargs(body.thinking),
    )


def generation_request(
    body: an.MessagesRequest, model: str, request_id: RequestId
) -> GenerationRequest:
    stops = body.stop_sequences or []
    if any(s == "" for s in stops):
        raise InvalidRequest("stop_sequences must not be empty strings", param="stop_sequences")
    # Unset fields stay None: the engine fills them from the model's generation_config.
    sampling = SamplingParams(temperature=body.temperature, top_p=body.top_p, top_k=body.top_k)
    choice = body.tool_choice
    return dataclasses.replace(
        count_request(body, model, request_id),
        parallel_tool_calls=not (choice is not None and choice.disable_parallel_tool_use),
        max_tokens=body.max_tokens,
        stop=list(stops),
        sampling=sampling,
        thinking_budget_tokens=_thinking_budget(body),
    )
