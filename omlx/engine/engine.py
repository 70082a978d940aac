"""One loaded model, seen from asyncio: submit, stream parsed events, cancel (no MLX here).

The engine thread (loop.py, through its backend) owns MLX. Prompts are rendered and
tokenized on a one-thread worker so neither the event loop nor the engine loop waits for it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from omlx.engine.api import (
    Done,
    Failed,
    GenerationEvent,
    GenerationRequest,
    RequestId,
    Token,
    ToolCall,
)
from omlx.engine.commands import AltPath, Call, Cancel, EventSink, Shutdown, Submission, Submit
from omlx.engine.constraints import (
    CompiledGrammar,
    GrammarCompiler,
    is_constrained,
    request_grammar,
)
from omlx.engine.loop import EngineLoop
from omlx.engine.metrics import EngineMetrics
from omlx.engine.parsed_stream import DirectQueue, ParsedStream, coalesce
from omlx.engine.text.parsers import OutputParser, detect_tool_format, make_output_parser
from omlx.engine.text.templating import ModelSpec, PreparedPrompt, prepare_prompt
from omlx.engine.text.validation import check_prompt_fits, validate_request
from omlx.errors import OmlxError, Overloaded
from omlx.settings import EngineSettings


class TextEngine:
    """An engine thread for one model plus its asyncio-facing handle."""

    def __init__(
        self,
        name: str,
        path: Path,
        settings: EngineSettings,
        *,
        prefix_factory: Callable[[Any, Path], Any] | None = None,
        alt_path: AltPath | None = None,
    ) -> None:

        self.name = name
        self.settings = settings
        self.metrics = EngineMetrics(model=name)
        self._engine_loop = EngineLoop(
            name, path, settings, self.metrics, prefix_factory=prefix_factory, alt_path=alt_path
        )
        self._thread = threading.Thread(
            target=self._engine_loop.run, name=f"omlx-engine-{name}", daemon=True
        )
        self._tokenize = concurrent.futures.ThreadPoolExecutor(
            1, thread_name_prefix=f"omlx-tokenize-{name}"
        )
        self._in_flight = 0
        self._closed = False
        self.spec: ModelSpec | None = None
        self._tokenizer: Any = None
        self._eos_ids: list[int] = []
        self.sampling_defaults: dict[str, float | int] = {}  # the model's generation_config
        self._grammars: GrammarCompiler | None = None  # built on the first constrained request

    async def start(self) -> None:
        """Start the thread and wait until the weights are loaded (raises load errors)."""
        self._thread.start()
        lm = await asyncio.wrap_future(self._engine_loop.loaded)
        self.spec, self._tokenizer = lm.spec, lm.tokenizer
        self._eos_ids = sorted(lm.eos_token_ids)
        self.sampling_defaults = dict(lm.sampling_defaults)

    @property
    def is_alive(self) -> bool:
        return self._thread.is_alive()

    @property
    def capacity(self) -> int:
        return self.settings.max_running + self.settings.max_queued

    @property
    def engine_loop(self) -> Any:
        """The EngineLoop on this model's thread (its fields are read-only from here)."""
        return self._engine_loop

    def with_model_defaults(self, request: GenerationRequest) -> GenerationRequest:
        """The request with the sampling fields it left unset taken from the model."""
        sampling = request.sampling.with_defaults(self.sampling_defaults)
        if sampling is request.sampling:
            return request
        return dataclasses.replace(request, sampling=sampling)

    async def prepare(self, request: GenerationRequest) -> PreparedPrompt:
        """Validate, render and tokenize; raises InvalidRequest / ContextTooLong."""
        assert self.spec is not None, "engine not started"
        request = self.with_model_defaults(request)
        validate_request(request, vocab_size=self.spec.vocab_size)
        check_prompt_fits(request, self.spec.context_length)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._tokenize,
            lambda: prepare_prompt(
                request,
                self._tokenizer,
                self.spec,
                default_max_tokens=self.settings.default_max_tokens,
                strict_max_tokens=self.settings.strict_max_tokens,
                max_output_tokens=self.settings.max_output_tokens,
            ),
        )

    async def compile_grammar(
        self, request: GenerationRequest, prompt: PreparedPrompt
    ) -> CompiledGrammar | None:
        """The request's output grammar, compiled; InvalidRequest when it cannot be enforced."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._tokenize, lambda: self._compile(request, prompt))

    def _compile(
        self, request: GenerationRequest, prompt: PreparedPrompt
    ) -> CompiledGrammar | None:
        assert self.spec is not None
        spec = self.spec
        if not is_constrained(request):
            return None
        if self._grammars is None:
            vocab = spec.vocab_size or len(self._tokenizer)
            self._grammars = GrammarCompiler.for_tokenizer(self._tokenizer, vocab, self._eos_ids)
        # The format the prompt taught: omlx's own when it wrote the tools in, else the family's.
        tool_format = (
            prompt.tool_format or detect_tool_format(spec.chat_template, spec.model_type).name
        )
        grammar = request_grammar(request, tool_format, self._grammars.special_id)
        assert grammar is not None
        return self._grammars.compile(grammar)

    async def count_tokens(self, request: GenerationRequest) -> int:
        return len((await self.prepare(request)).token_ids)

    async def generate(self, request: GenerationRequest) -> AsyncIterator[GenerationEvent]:
        """Events of one request; OmlxErrors are raised before the first event."""
        self._admit()
        self._in_flight += 1
        submitted = finished = False
        received_at = time.monotonic()
        request = self.with_model_defaults(request)
        try:
            prompt, grammar = await self._prepared(request)
            sink = EventSink(asyncio.get_running_loop(), asyncio.Queue())
            self._submit(request, prompt, grammar, sink, received_at)
            submitted = True
            async for event in self._parsed(request.request_id, prompt, sink):
                finished = isinstance(event, Done | Failed)
                yield event
        finally:
            self._in_flight -= 1
            if submitted and not finished:  # the consumer left: free the slot
                self._engine_loop.commands.put(Cancel(request.request_id))

    async def generate_into(
        self, request: GenerationRequest, deliver: Callable[[GenerationEvent], None]
    ) -> None:
        """`generate`, with each parsed event handed to `deliver` on the event loop as the
        engine's step hands it over (no task woken per token); returns after Done or
        Failed. Cancelling the caller cancels the request."""
        self._admit()
        self._in_flight += 1
        submitted = False
        received_at = time.monotonic()
        request = self.with_model_defaults(request)
        loop = asyncio.get_running_loop()
        finished: asyncio.Future[None] = loop.create_future()
        try:
            prompt, grammar = await self._prepared(request)
            stream = ParsedStream(request.request_id, self._output_parser(prompt))
            sink = EventSink(loop, DirectQueue(stream, deliver, finished))  # type: ignore[arg-type]
            self._submit(request, prompt, grammar, sink, received_at)
            submitted = True
            await finished
        finally:
            self._in_flight -= 1
            if submitted and not finished.done():
                self._engine_loop.commands.put(Cancel(request.request_id))

    def _admit(self) -> None:
        if not self._thread.is_alive() and not self._closed:
            raise OmlxError(f"the engine of model {self.name!r} stopped; see the server log")
        if self._closed or self._in_flight >= self.capacity:
            raise Overloaded(
                f"model {self.name!r} has {self._in_flight} requests in flight "
                f"(limit {self.capacity}); retry shortly",
                retry_after_s=1,
            )

    async def _prepared(
        self, request: GenerationRequest
    ) -> tuple[PreparedPrompt, CompiledGrammar | None]:
        prompt = await self.prepare(request)
        return prompt, await self.compile_grammar(request, prompt)

    def _submit(
        self,
        request: GenerationRequest,
        prompt: PreparedPrompt,
        grammar: CompiledGrammar | None,
        sink: EventSink,
        received_at: float,
    ) -> None:
        submission = Submission(
            request.request_id,
            prompt,
            request.sampling,
            list(request.stop),
            sink,
            thinking_budget_tokens=request.thinking_budget_tokens,
            grammar=grammar,
            received_at=received_at,
        )
        self._engine_loop.commands.put(Submit(submission))

    def _output_parser(self, prompt: PreparedPrompt) -> OutputParser:
        assert self.spec is not None
        return make_output_parser(
            chat_template=self.spec.chat_template,
            model_type=self.spec.model_type,
            tools_enabled=prompt.tools_enabled,
            thinking=prompt.thinking,
            prompt_ends_in_think=prompt.prompt_ends_in_think,
            tool_format=prompt.tool_format,
        )

    async def _parsed(
        self, request_id: RequestId, prompt: PreparedPrompt, sink: EventSink
    ) -> AsyncIterator[GenerationEvent]:
        """Runs the reasoning/tool-call parser over the raw Token text."""
        stream = ParsedStream(request_id, self._output_parser(prompt))
        held: GenerationEvent | None = None
        while not stream.finished:
            if held is None:
                event = await sink.queue.get()
            else:
                event, held = held, None
            if isinstance(event, Token):
                event, held = coalesce(event, sink.queue)
            for out in stream.feed(event):
                yield out

    def cancel(self, request_id: RequestId) -> None:
        self._engine_loop.commands.put(Cancel(request_id))

    async def call(self, fn: Callable[[], Any]) -> Any:
        """Run fn on the engine thread (for MLX reads); returns its result."""
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._engine_loop.commands.put(Call(fn, future))
        return await asyncio.wrap_future(future)

    async def close(self, grace_s: float = 5.0) -> None:
        """Let running requests finish for up to grace_s, cancel the rest, stop the thread."""
        if self._closed:
            return
        self._closed = True
        if self._thread.is_alive():
            self._engine_loop.commands.put(Shutdown(grace_s))
            await asyncio.to_thread(self._thread.join, grace_s + 30.0)
        self._tokenize.shutdown(wait=False)


__all__ = ["TextEngine", "ToolCall"]
