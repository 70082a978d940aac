"""Responses API input items → the engine's `GenerationRequest`; the previous_response_id store."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from omlx.engine.api import (
    ChatMessage,
    GenerationRequest,
    RequestId,
    ResponseFormat,
    SamplingParams,
)
from omlx.errors import InvalidRequest, NotFound
from omlx.schemas import responses as rs
from omlx.server.openai_requests import structured_format

_TEXT_PARTS = ("input_text", "output_text", "text", "summary_text", "reasoning_text")


class ResponseStore:
    """The last `max_responses` responses: their whole conversation and their body.

    Bounded LRU, in memory: a restart forgets them, as `store` data may be lost anyway.
    """

    def __init__(self, max_responses: int) -> None:
        self.max_responses = max_responses
        self._items: OrderedDict[str, tuple[list[ChatMessage], rs.ResponseObject]] = OrderedDict()

    def put(self, response: rs.ResponseObject, conversation: list[ChatMessage]) -> None:
        if self.max_responses <= 0:
            return
        self._items[response.id] = (conversation, response)
        self._items.move_to_end(response.id)
        while len(self._items) > self.max_responses:
            self._items.popitem(last=False)

    def conversation(self, response_id: str) -> list[ChatMessage]:
        return list(self._get(response_id)[0])

    def response(self, response_id: str) -> rs.ResponseObject:
        return self._get(response_id)[1]

    def _get(self, response_id: str) -> tuple[list[ChatMessage], rs.ResponseObject]:
        item = self._items.get(response_id)
        if item is None:
            raise NotFound(
                f"previous response {response_id!r} not found (it was never stored or was "
                f"evicted; the server keeps the last {self.max_responses})",
                param="previous_response_id",
            )
        self._items.move_to_end(response_id)
        return item


def _content(content: Any, where: str) -> str | list[dict[str, Any]]:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise InvalidRequest(f"{where}.content must be a string or a list of parts", param=where)
    parts: list[dict[str, Any]] = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in _TEXT_PARTS:
            parts.append({"type": "text", "text": str(part.get("text", ""))})
        elif kind == "input_image" and isinstance(part.get("image_url"), str):
            parts.append({"type": "image_url", "image_url": {"url": part["image_url"]}})
        else:
            raise InvalidRequest(
                f"{where}.content[{j}]: unsupported part type {kind!r}",
                param=f"{where}.content[{j}]",
            )
    if all(p["type"] == "text" for p in parts):
        return "".join(p["text"] for p in parts)
    return parts


class _Builder:
    """Folds items into chat messages: calls join one assistant turn, reasoning rides along."""

    def __init__(self) -> None:
        self.messages: list[ChatMessage] = []
        self._calls: list[dict[str, Any]] = []
        self._reasoning: list[str] = []

    def _flush_calls(self) -> None:
        if self._calls or self._reasoning:
            self.messages.append(
                ChatMessage(
                    role="assistant",
                    content="",
                    tool_calls=self._calls or None,
                    reasoning_content="\n".join(self._reasoning) or None,
                )
            )
            self._calls, self._reasoning = [], []

    def add(self, item: dict[str, Any], where: str) -> None:
        kind = item.get("type", "message")
        if kind == "message":
            self._message(item, where)
        elif kind == "function_call":
            if not isinstance(item.get("name"), str) or not isinstance(item.get("call_id"), str):
                raise InvalidRequest(f"{where}: function_call needs name and call_id", param=where)
            self._calls.append(
                {
                    "id": item["call_id"],
                    "type": "function",
                    "function": {"name": item["name"], "arguments": item.get("arguments") or "{}"},
                }
            )
        elif kind == "function_call_output":
            self._flush_calls()
            output = item.get("output", "")
            text = output if isinstance(output, str) else _content(output, where)
            self.messages.append(
                ChatMessage(role="tool", content=text, tool_call_id=str(item.get("call_id", "")))
            )
        elif kind == "reasoning":
            parts = [*(item.get("content") or []), *(item.get("summary") or [])]
            self._reasoning.extend(str(p.get("text", "")) for p in parts if isinstance(p, dict))
        elif kind != "item_reference":
            raise InvalidRequest(f"{where}: unsupported input item type {kind!r}", param=where)

    def _message(self, item: dict[str, Any], where: str) -> None:
        role = item.get("role")
        if role not in ("user", "assistant", "system", "developer"):
            raise InvalidRequest(f"{where}.role: unsupported role {role!r}", param=f"{where}.role")
        content = _content(item.get("content", ""), where)
        if role == "assistant" and (self._calls or self._reasoning):
            reasoning = "\n".join(self._reasoning) or None
            self.messages.append(
                ChatMessage(
                    role="assistant",
                    content=content,
                    tool_calls=self._calls or None,
                    reasoning_content=reasoning,
                )
            )
            self._calls, self._reasoning = [], []
            return
        self._flush_calls()
        self.messages.append(ChatMessage(role=role, content=content))

    def finish(self) -> list[ChatMessage]:
        self._flush_calls()
        return self.messages


def input_messages(body: rs.ResponsesRequest) -> list[ChatMessage]:
    """This turn's new messages (instructions are added per request, not stored)."""
    if isinstance(body.input, str):
        return [ChatMessage(role="user", content=body.input)]
    builder = _Builder()
    for i, item in enumerate(body.input):
        builder.add(item, f"input[{i}]")
    return builder.finish()


def _tools(tools: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    """Function tools in chat form; built-in tools (web search, …) are not served here."""
    out = [
        {
            "type": "function",
            "function": {
                "name": tool["name"],
                "description": tool.get("description") or "",
                "parameters": tool.get("parameters") or {"type": "object", "properties": {}},
            },
        }
        for tool in tools or []
        if tool.get("type") == "function" and isinstance(tool.get("name"), str)
    ]
    return out or None


def _tool_choice(choice: str | dict[str, Any] | None) -> Any:
    if choice is None or choice == "auto":
        return None
    if choice in ("none", "required"):
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function" and choice.get("name"):
        return {"type": "function", "function": {"name": choice["name"]}}
    raise InvalidRequest(f"unsupported tool_choice {choice!r}", param="tool_choice")


def text_format(text: dict[str, Any] | None) -> ResponseFormat | None:
    """`text.format`: {"type": "json_schema", "name", "schema", "strict"} or json_object."""
    fmt = (text or {}).get("format")
    if fmt is None:
        return None
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return ResponseFormat("json_object")
    if kind == "json_schema":
        if not isinstance(fmt.get("schema"), dict):
            raise InvalidRequest(
                "text.format json_schema needs a schema object", param="text.format.schema"
            )
        return structured_format("json_schema", fmt["schema"], fmt.get("name"))
    raise InvalidRequest(f"unsupported text.format type {kind!r}", param="text.format.type")


def generation_request(
    body: rs.ResponsesRequest,
    model: str,
    request_id: RequestId,
    history: list[ChatMessage],
) -> tuple[GenerationRequest, list[ChatMessage]]:
    """The request, and the conversation (history + this input) to store with its answer."""
    conversation = [*history, *input_messages(body)]
    messages = list(conversation)
    if body.instructions:
        messages.insert(0, ChatMessage(role="system", content=body.instructions))
    if not messages:
        raise InvalidRequest("input must not be empty", param="input")
    effort = body.reasoning.effort if body.reasoning else None
    kwargs = {"enable_thinking": False} if effort in ("none", "minimal") else {}
    # Unset fields stay None: the engine fills them from the model's generation_config.
    sampling = SamplingParams(temperature=body.temperature, top_p=body.top_p)
    gen = GenerationRequest(
        request_id=request_id,
        model=model,
        messages=messages,
        max_tokens=body.max_output_tokens,  # unset: the engine fits its default
        sampling=sampling,
        tools=_tools(body.tools),
        tool_choice=_tool_choice(body.tool_choice),
        chat_template_kwargs=kwargs,
        response_format=text_format(body.text),
        parallel_tool_calls=body.parallel_tool_calls,
    )
    return gen, conversation
