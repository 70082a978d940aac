"""One request's raw engine events through its reasoning/tool-call parser (pure Python).

`TextEngine.generate` pulls events from the request's asyncio queue and feeds them here;
`DirectQueue` stands in for that queue where nobody iterates (the engine process): the
event loop's hand-off then parses and forwards each step's events in the same call, with
no task to wake per token.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from omlx.engine.api import Done, Failed, FinishReason, GenerationEvent, RequestId, Token
from omlx.engine.text.parsers import OutputParser


class ParsedStream:
    """Raw Token text in, content / reasoning / tool calls out; Done carries the count."""

    __slots__ = ("_num_calls", "_parser", "_pending_ids", "finished", "request_id")

    def __init__(self, request_id: RequestId, parser: OutputParser) -> None:
        self.request_id = request_id
        self._parser = parser
        self._pending_ids: list[int] = []
        self._num_calls = 0
        self.finished = False  # after Done or Failed: nothing more comes out

    def feed(self, event: GenerationEvent) -> list[GenerationEvent]:
        rid = self.request_id
        if isinstance(event, Token):
            d = self._parser.feed(event.text)
            self._pending_ids.extend(event.token_ids)
            if not (d.content or d.reasoning or d.tool_calls or event.logprobs):
                return []  # held back (a tag may be starting); its ids go with the next
            self._num_calls += len(d.tool_calls)
            ids, self._pending_ids = self._pending_ids, []
            return [Token(rid, d.content, ids, d.reasoning, list(d.tool_calls), event.logprobs)]
        if isinstance(event, Done):
            self.finished = True
            d = self._parser.finish()
            self._num_calls += len(d.tool_calls)
            out: list[GenerationEvent] = []
            if d.content or d.reasoning or d.tool_calls or self._pending_ids:
                out.append(
                    Token(rid, d.content, self._pending_ids, d.reasoning, list(d.tool_calls))
                )
            out.append(_with_tool_calls(event, self._num_calls))
            return out
        if isinstance(event, Failed):
            self.finished = True
        return [event]


class DirectQueue:
    """What the engine's Outbox puts events into, for a consumer that takes callbacks:
    each event is parsed and handed to `deliver` at once, on the event loop."""

    def __init__(
        self,
        stream: ParsedStream,
        deliver: Callable[[GenerationEvent], None],
        finished: asyncio.Future[None],
    ) -> None:
        self._stream = stream
        self._deliver = deliver
        self._finished = finished

    def put_nowait(self, event: GenerationEvent) -> None:
        if self._stream.finished:
            return
        for out in self._stream.feed(event):
            self._deliver(out)
        if self._stream.finished and not self._finished.done():
            self._finished.set_result(None)


def coalesce(
    token: Token, queue: asyncio.Queue[GenerationEvent]
) -> tuple[Token, GenerationEvent | None]:
    """`token` merged with the Tokens already queued behind it, and the first other event.

    When the event loop falls behind the engine (many streams), a stream's tokens of
    several steps wait in its queue; parsing and rendering them as one event costs the
    event loop (and the GIL the engine thread needs) once instead of once per token.
    """
    if queue.empty():
        return token, None
    texts, ids, logprobs = [token.text], list(token.token_ids), list(token.logprobs or [])
    held: GenerationEvent | None = None
    while not queue.empty():
        event = queue.get_nowait()
        if not isinstance(event, Token):
            held = event
            break
        texts.append(event.text)
        ids.extend(event.token_ids)
        logprobs.extend(event.logprobs or [])
    merged = Token(token.request_id, "".join(texts), ids, logprobs=logprobs or None)
    return merged, held


def _with_tool_calls(done: Done, num_calls: int) -> Done:
    if num_calls and done.finish_reason == FinishReason.STOP:
        return Done(
            done.request_id,
            FinishReason.TOOL_CALLS,
            done.prompt_tokens,
            done.completion_tokens,
            done.cached_tokens,
            done.served_by,
            done.stop_sequence,
        )
    return done
