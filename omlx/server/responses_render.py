"""Engine results → Responses API objects and the response.* SSE event sequence."""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any

from omlx.engine.api import ChatMessage, Done, FinishReason, Started, Token, ToolCall
from omlx.schemas import responses as rs
from omlx.server.errors import error_info
from omlx.server.generation import Collected
from omlx.server.sse import frame

log = logging.getLogger(__name__)


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:24]}"


def _call_item(call: ToolCall, status: str = "completed") -> rs.FunctionCallItem:
    return rs.FunctionCallItem(
        id="fc_" + call.id.removeprefix("call_"),
        call_id=call.id,
        name=call.name,
        arguments=call.arguments,
        status=status,  # type: ignore[arg-type]
    )


def output_items(result: Collected, status: str) -> list[rs.OutputItem]:
    items: list[rs.OutputItem] = []
    if result.reasoning:
        items.append(
            rs.ReasoningItem(
                id=new_id("rs"), summary=[], content=[rs.ReasoningText(text=result.reasoning)]
            )
        )
    if result.text:
        items.append(
            rs.MessageItem(
                id=new_id("msg"),
                status=status,  # type: ignore[arg-type]
                content=[rs.OutputText(text=result.text)],
            )
        )
    items.extend(_call_item(call) for call in result.tool_calls)
    return items


def answer_message(result: Collected) -> ChatMessage:
    """The assistant turn to remember for previous_response_id."""
    calls = [
        {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
        for c in result.tool_calls
    ]
    return ChatMessage(
        role="assistant",
        content=result.text,
        tool_calls=calls or None,
        reasoning_content=result.reasoning or None,
    )


def _status(done: Done | None) -> str:
    if done is not None and done.finish_reason is FinishReason.LENGTH:
        return "incomplete"
    return "completed"


def usage(done: Done | None, reasoning_tokens: int) -> rs.ResponseUsage | None:
    if done is None:
        return None
    return rs.ResponseUsage(
        input_tokens=done.prompt_tokens,
        input_tokens_details=rs.InputTokensDetails(cached_tokens=done.cached_tokens),
        output_tokens=done.completion_tokens,
        output_tokens_details=rs.OutputTokensDetails(reasoning_tokens=reasoning_tokens),
        total_tokens=done.prompt_tokens + done.completion_tokens,
    )


def response_object(
    response_id: str,
    body: rs.ResponsesRequest,
    model: str,
    *,
    status: str,
    output: list[rs.OutputItem],
    done: Done | None = None,
    reasoning_tokens: int = 0,
    error: rs.ResponseError | None = None,
) -> rs.ResponseObject:
    return rs.ResponseObject(
        id=response_id,
        created_at=int(time.time()),
        status=status,  # type: ignore[arg-type]
        error=error,
        incomplete_details=rs.IncompleteDetails(reason="max_output_tokens")
        if status == "incomplete"
        else None,
        instructions=body.instructions,
        max_output_tokens=body.max_output_tokens,
        model=model,
        output=output,
        parallel_tool_calls=body.parallel_tool_calls,
        previous_response_id=body.previous_response_id,
        reasoning=body.reasoning or rs.ReasoningConfig(),
        store=body.store,
        temperature=body.temperature,
        text=body.text or {"format": {"type": "text"}},
        tool_choice=body.tool_choice or "auto",
        tools=list(body.tools or []),
        top_p=body.top_p,
        usage=usage(done, reasoning_tokens),
        user=body.user,
        metadata=dict(body.metadata or {}),
    )


def final_response(
    response_id: str, body: rs.ResponsesRequest, model: str, result: Collected
) -> rs.ResponseObject:
    status = _status(result.done)
    return response_object(
        response_id,
        body,
        model,
        status=status,
        output=output_items(result, status),
        done=result.done,
    )


class ResponseStreamer:
    """Renders events as response.created … response.completed, numbering every event.

    Reasoning and text each form one output item while they flow; a change of kind
    closes the open item; each tool call is its own function_call item.
    """

    def __init__(self, response_id: str, body: rs.ResponsesRequest, model: str) -> None:
        self.response_id = response_id
        self.body = body
        self.model = model
        self.result = Collected()
        self.final: rs.ResponseObject | None = None
        self._seq = 0
        self._items: list[rs.OutputItem] = []
        self._open: rs.MessageItem | rs.ReasoningItem | None = None
        self._open_text = ""
        self._reasoning_tokens = 0
        self._ticks = 0

    def _event(self, kind: str, payload: dict[str, Any]) -> bytes:
        data = {"type": kind, "sequence_number": self._seq, **payload}
        self._seq += 1
        return frame(data, event=kind)

    def start(self) -> list[bytes]:
        snapshot = response_object(
            self.response_id, self.body, self.model, status="in_progress", output=[]
        )
        return [
            self._event("response.created", {"response": snapshot}),
            self._event("response.in_progress", {"response": snapshot}),
        ]

    def keepalive(self) -> bytes:
        """A `response.in_progress` event: Codex's stream idle timer (300 s) counts events,
        not SSE comments, and a long prompt on a CPU can take longer than that to prefill.
        The first tick comes with the opening, which already said in_progress: nothing."""
        self._ticks += 1
        if self._ticks == 1:
            return b""
        snapshot = response_object(
            self.response_id, self.body, self.model, status="in_progress", output=list(self._items)
        )
        return self._event("response.in_progress", {"response": snapshot})

    def render(self, event: Any) -> list[bytes]:
        if isinstance(event, Started):
            return []
        out: list[bytes] = []
        if isinstance(event, Token):
            if event.reasoning:
                self._reasoning_tokens += max(1, len(event.token_ids))
                self.result.reasoning += event.reasoning
                out += self._delta("reasoning", event.reasoning)
            if event.text:
                self.result.text += event.text
                out += self._delta("message", event.text)
            for call in event.tool_calls:
                self.result.tool_calls.append(call)
                out += self._tool_call(call)
        elif isinstance(event, Done):
            self.result.done = event
            out += self._close()
            status = _status(event)
            self.final = response_object(
                self.response_id,
                self.body,
                self.model,
                status=status,
                output=self._items,
                done=event,
                reasoning_tokens=self._reasoning_tokens,
            )
            kind = "response.incomplete" if status == "incomplete" else "response.completed"
            out.append(self._event(kind, {"response": self.final}))
        return out

    def error(self, exc: BaseException) -> bytes:
        info = error_info(exc)
        if info.status >= 500 and info.retry_after_s is None:
            log.error("stream failed: %s", info.message, exc_info=exc)
        failed = response_object(
            self.response_id,
            self.body,
            self.model,
            status="failed",
            output=self._items,
            error=rs.ResponseError(code=info.code or info.openai_type, message=info.message),
        )
        return self._event("response.failed", {"response": failed})

    def _delta(self, kind: str, text: str) -> list[bytes]:
        out: list[bytes] = []
        is_open = self._open is not None and self._open.__struct_config__.tag == kind
        if not is_open:
            out += self._close()
            out += self._open_item(kind)
        assert self._open is not None
        self._open_text += text
        where = {"item_id": self._open.id, "output_index": len(self._items), "content_index": 0}
        if kind == "reasoning":
            out.append(self._event("response.reasoning_text.delta", {**where, "delta": text}))
        else:
            out.append(
                self._event("response.output_text.delta", {**where, "delta": text, "logprobs": []})
            )
        return out

    def _open_item(self, kind: str) -> list[bytes]:
        index = len(self._items)
        if kind == "reasoning":
            self._open = rs.ReasoningItem(id=new_id("rs"), summary=[], content=[])
            return [
                self._event(
                    "response.output_item.added", {"output_index": index, "item": self._open}
                )
            ]
        self._open = rs.MessageItem(id=new_id("msg"), status="in_progress", content=[])
        part = rs.OutputText(text="")
        where = {"item_id": self._open.id, "output_index": index, "content_index": 0}
        return [
            self._event("response.output_item.added", {"output_index": index, "item": self._open}),
            self._event("response.content_part.added", {**where, "part": part}),
        ]

    def _close(self) -> list[bytes]:
        item, text = self._open, self._open_text
        if item is None:
            return []
        self._open, self._open_text = None, ""
        index = len(self._items)
        where = {"item_id": item.id, "output_index": index, "content_index": 0}
        out: list[bytes] = []
        if isinstance(item, rs.ReasoningItem):
            item.content = [rs.ReasoningText(text=text)]
            out.append(self._event("response.reasoning_text.done", {**where, "text": text}))
        else:
            part = rs.OutputText(text=text)
            item.content, item.status = [part], "completed"
            out.append(
                self._event("response.output_text.done", {**where, "text": text, "logprobs": []})
            )
            out.append(self._event("response.content_part.done", {**where, "part": part}))
        out.append(self._event("response.output_item.done", {"output_index": index, "item": item}))
        self._items.append(item)
        return out

    def _tool_call(self, call: ToolCall) -> list[bytes]:
        out = self._close()
        index = len(self._items)
        item = _call_item(call, status="in_progress")
        item.arguments = ""
        where = {"item_id": item.id, "output_index": index}
        out.append(self._event("response.output_item.added", {"output_index": index, "item": item}))
        out.append(
            self._event(
                "response.function_call_arguments.delta", {**where, "delta": call.arguments}
            )
        )
        out.append(
            self._event(
                "response.function_call_arguments.done",
                {**where, "name": call.name, "arguments": call.arguments},
            )
        )
        done = _call_item(call)
        out.append(self._event("response.output_item.done", {"output_index": index, "item": done}))
        self._items.append(done)
        return out
