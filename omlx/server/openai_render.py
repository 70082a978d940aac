"""Engine events → OpenAI response bodies and SSE chunks (chat and text completions)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

import msgspec

from omlx.engine.api import (
    Done,
    FinishReason,
    GenerationEvent,
    PromptLogprobs,
    Token,
    TokenLogprob,
    ToolCall,
)
from omlx.schemas import openai as oa
from omlx.server.errors import Dialect, error_body, error_info
from omlx.server.generation import Collected
from omlx.server.sse import DONE, frame

log = logging.getLogger(__name__)

_encoder = msgspec.json.Encoder()


def finish_reason(done: Done | None, has_tool_calls: bool) -> str:
    if done is None:
        return "stop"
    if done.finish_reason is FinishReason.LENGTH:
        return "length"
    if has_tool_calls or done.finish_reason is FinishReason.TOOL_CALLS:
        return "tool_calls"
    return "stop"


def usage(done: Done | None) -> oa.Usage | None:
    if done is None:
        return None
    return oa.Usage(
        prompt_tokens=done.prompt_tokens,
        completion_tokens=done.completion_tokens,
        total_tokens=done.prompt_tokens + done.completion_tokens,
        prompt_tokens_details=oa.PromptTokensDetails(cached_tokens=done.cached_tokens),
    )


def error_frame(exc: BaseException) -> bytes:
    """The in-stream error event (after SSE started, no status code can change)."""
    info = error_info(exc)
    if info.status >= 500 and info.retry_after_s is None:
        log.error("stream failed: %s", info.message, exc_info=exc)
    return frame(error_body(info, Dialect.OPENAI))


def _token_bytes(token: str) -> list[int]:
    return list(token.encode("utf-8", errors="replace"))


def chat_logprobs(entries: list[TokenLogprob]) -> oa.ChoiceLogprobs:
    return oa.ChoiceLogprobs(
        content=[
            oa.TokenLogprobEntry(
                token=e.token,
                logprob=e.logprob,
                bytes=_token_bytes(e.token),
                top_logprobs=[
                    oa.TopLogprob(token=t, logprob=lp, bytes=_token_bytes(t)) for t, lp in e.top
                ],
            )
            for e in entries
        ]
    )


def echo_logprobs(prompt: PromptLogprobs | None) -> oa.CompletionLogprobs:
    """The echoed prompt's tokens with their log-probabilities (empty without echo)."""
    out = oa.CompletionLogprobs()
    offset = 0
    if prompt is None:
        return out
    for token, value, top in zip(prompt.tokens, prompt.logprobs, prompt.top, strict=True):
        out.tokens.append(token)
        out.token_logprobs.append(value)
        out.top_logprobs.append(None if top is None else dict(top))
        out.text_offset.append(offset)
        offset += len(token)
    return out


def completion_logprobs(entries: list[TokenLogprob], offset: int) -> oa.CompletionLogprobs:
    out = oa.CompletionLogprobs()
    for e in entries:
        out.tokens.append(e.token)
        out.token_logprobs.append(e.logprob)
        out.top_logprobs.append(dict(e.top))
        out.text_offset.append(offset)
        offset += len(e.token)
    return out


def _tool_calls(calls: list[ToolCall]) -> list[oa.ToolCall]:
    return [
        oa.ToolCall(id=c.id, function=oa.ToolCallFunction(name=c.name, arguments=c.arguments))
        for c in calls
    ]


def chat_completion(
    request_id: str, model: str, result: Collected, *, want_logprobs: bool
) -> oa.ChatCompletion:
    message = oa.AssistantMessage(content=result.text or None)
    if result.tool_calls:
        message.tool_calls = _tool_calls(result.tool_calls)
    elif message.content is None:
        message.content = ""  # a plain answer is a string, even when empty
    if result.reasoning:
        message.reasoning_content = result.reasoning
    return oa.ChatCompletion(
        id=request_id,
        created=int(time.time()),
        model=model,
        choices=[
            oa.ChatChoice(
                message=message,
                logprobs=chat_logprobs(result.logprobs) if want_logprobs else None,
                finish_reason=finish_reason(result.done, bool(result.tool_calls)),
            )
        ],
        usage=usage(result.done),
    )


@dataclass(slots=True)
class ChatChunker:
    """Renders one chat stream's events as `chat.completion.chunk` frames."""

    request_id: str
    model: str
    include_usage: bool
    want_logprobs: bool
    created: int = field(default_factory=lambda: int(time.time()))
    num_tool_calls: int = 0
    has_sent_role: bool = False
    _content_parts: tuple[bytes, bytes] | None = None

    def chunk(
        self, delta: oa.Delta, finish: str | None = None, logprobs: oa.ChoiceLogprobs | None = None
    ) -> oa.ChatCompletionChunk:
        out = oa.ChatCompletionChunk(
            id=self.request_id,
            created=self.created,
            model=self.model,
            choices=[oa.ChunkChoice(delta=delta, finish_reason=finish, logprobs=logprobs)],
        )
        if self.include_usage:
            out.usage = None
        return out

    def empty_chunk(self) -> bytes:
        return frame(self.chunk(oa.Delta()))

    def _content_frame(self, text: str) -> bytes:
        """The hot path (one plain-content chunk per token): splice the encoded text into
        this stream's fixed chunk bytes instead of building Structs each time."""
        if self._content_parts is None:
            marker = "\x00"
            whole = frame(self.chunk(oa.Delta(content=marker)))
            head, _, tail = whole.partition(_encoder.encode(marker))
            self._content_parts = (head, tail)
        head, tail = self._content_parts
        return head + _encoder.encode(text) + tail

    def render(self, event: GenerationEvent) -> list[bytes]:
        if isinstance(event, Token):
            return self._token(event)
        if isinstance(event, Done):
            return self._done(event)
        return []

    def _token(self, event: Token) -> list[bytes]:
        frames = []
        if not self.has_sent_role:
            self.has_sent_role = True
            frames.append(frame(self.chunk(oa.Delta(role="assistant", content=""))))
        if event.text and not (event.reasoning or event.tool_calls or self.want_logprobs):
            frames.append(self._content_frame(event.text))
            return frames
        delta = oa.Delta()
        if event.reasoning:
            delta.reasoning_content = event.reasoning
        if event.text:
            delta.content = event.text
        if event.tool_calls:
            delta.tool_calls = []
            for call in event.tool_calls:
                delta.tool_calls.append(
                    oa.DeltaToolCall(
                        index=self.num_tool_calls,
                        id=call.id,
                        type="function",
                        function=oa.DeltaToolCallFunction(name=call.name, arguments=call.arguments),
                    )
                )
                self.num_tool_calls += 1
        logprobs = chat_logprobs(event.logprobs) if self.want_logprobs and event.logprobs else None
        if delta != oa.Delta() or logprobs is not None:
            frames.append(frame(self.chunk(delta, logprobs=logprobs)))
        return frames

    def _done(self, event: Done) -> list[bytes]:
        frames = []
        if not self.has_sent_role:
            self.has_sent_role = True
            frames.append(frame(self.chunk(oa.Delta(role="assistant", content=""))))
        reason = finish_reason(event, self.num_tool_calls > 0)
        frames.append(frame(self.chunk(oa.Delta(), finish=reason)))
        if self.include_usage:
            frames.append(
                frame(
                    oa.ChatCompletionChunk(
                        id=self.request_id,
                        created=self.created,
                        model=self.model,
                        choices=[],
                        usage=usage(event),
                    )
                )
            )
        frames.append(DONE)
        return frames


def completion(
    request_id: str,
    model: str,
    result: Collected,
    *,
    echo: str,
    want_logprobs: bool,
    prompt_logprobs: PromptLogprobs | None = None,
) -> oa.Completion:
    logprobs = None
    if want_logprobs:
        logprobs = echo_logprobs(prompt_logprobs)
        answer = completion_logprobs(result.logprobs, len(echo))
        for name in ("tokens", "token_logprobs", "top_logprobs", "text_offset"):
            getattr(logprobs, name).extend(getattr(answer, name))
    return oa.Completion(
        id=request_id,
        created=int(time.time()),
        model=model,
        choices=[
            oa.CompletionChoice(
                text=echo + result.text,
                logprobs=logprobs,
                finish_reason=finish_reason(result.done, False),
            )
        ],
        usage=usage(result.done),
    )


@dataclass(slots=True)
class CompletionChunker:
    """Renders one text-completion stream's events as `text_completion` chunks."""

    request_id: str
    model: str
    include_usage: bool
    want_logprobs: bool
    echo: str = ""
    prompt_logprobs: PromptLogprobs | None = None
    created: int = field(default_factory=lambda: int(time.time()))
    offset: int = 0

    def chunk(
        self, text: str, finish: str | None = None, logprobs: oa.CompletionLogprobs | None = None
    ) -> oa.Completion:
        out = oa.Completion(
            id=self.request_id,
            created=self.created,
            model=self.model,
            choices=[oa.CompletionChoice(text=text, finish_reason=finish, logprobs=logprobs)],
        )
        if self.include_usage:
            out.usage = None
        return out

    def empty_chunk(self) -> bytes:
        return frame(self.chunk(""))

    def render(self, event: GenerationEvent) -> list[bytes]:
        frames = []
        if self.echo:
            echoed = echo_logprobs(self.prompt_logprobs) if self.want_logprobs else None
            frames.append(frame(self.chunk(self.echo, logprobs=echoed)))
            self.offset, self.echo = len(self.echo), ""
        if isinstance(event, Token):
            logprobs = None
            if self.want_logprobs and event.logprobs:
                logprobs = completion_logprobs(event.logprobs, self.offset)
            self.offset += len(event.text)
            if event.text or logprobs is not None:
                frames.append(frame(self.chunk(event.text, logprobs=logprobs)))
        elif isinstance(event, Done):
            frames.append(frame(self.chunk("", finish=finish_reason(event, False))))
            if self.include_usage:
                last = oa.Completion(
                    id=self.request_id,
                    created=self.created,
                    model=self.model,
                    choices=[],
                    usage=usage(event),
                )
                frames.append(frame(last))
            frames.append(DONE)
        return frames
