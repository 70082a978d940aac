"""`omlx serve`'s side of the engine process: a ModelPool and a CacheAdmin over the wire.

The HTTP server keeps its routes, SSE and JSON work in this process; the models, their
engine threads and the KV cache live in a child (`omlx.enginehost.host`). Generation
events stream back as they are produced (one write per child event-loop turn, every
stream's events together); calls that change what is loaded or pinned are answered
with the pool's fresh state; otherwise the child pushes that state twice a second (and
soon after a request starts or ends), so the synchronous pool methods (stats, status,
list_models, model_state) answer at once from a copy at most ~0.5 s old.

If the child dies (killed for memory, a crash in native code), every open stream and
call fails with a 503 that says so, and the child is started again at once, or
RESTART_BACKOFF_S after its last start if it died sooner; a start that fails is tried
again at the next request. Imports no MLX.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import msgspec

from omlx.engine.api import (
    Done,
    EmbeddingRequest,
    EmbeddingResult,
    Failed,
    GenerationEvent,
    GenerationRequest,
    ModelInfo,
    Progress,
    PromptLogprobs,
    RequestId,
    RerankRequest,
    RerankResult,
    Started,
    Token,
)
from omlx.enginehost.wire import (
    TOKEN_TAG,
    BatchWriter,
    Call,
    Cancel,
    Closed,
    Ended,
    Generate,
    GenerateFailed,
    Init,
    LogRecordMsg,
    PoolState,
    Ready,
    Reply,
    Shutdown,
    WireClosed,
    encode,
    read_batch,
    recv_batch_blocking,
    unpack_token,
)
from omlx.errors import OmlxError, Overloaded
from omlx.schemas.cache import CacheReport
from omlx.schemas.models import PoolStatus
from omlx.schemas.stats import StatsSnapshot
from omlx.settings import Settings

log = logging.getLogger(__name__)

START_TIMEOUT_S = 300.0  # imports and the pool's set-up; models load later
RESTART_BACKOFF_S = 10.0
_STREAM_MESSAGES = (Token, Started, Progress, Done, Failed, Ended, GenerateFailed)


class EngineProcessGone(Overloaded):
    """The engine process exited; it is (being) started again."""


def reemit(data: dict[str, Any]) -> None:
    """Log a record of the engine process here (console, the admin's log view)."""
    record = logging.makeLogRecord({**data, "args": None, "exc_info": None})
    logging.getLogger(record.name).handle(record)


class EngineProcess:
    """The child and this end of its socket. `start()` blocks until the pool is built."""

    def __init__(self, settings: Settings, default: str, default_path: Path) -> None:
        self._init = Init(msgspec.json.encode(settings), default, str(default_path))
        self.proc: subprocess.Popen[bytes] | None = None
        self.sock: socket.socket | None = None
        self.started_at = 0.0

    def start(self) -> PoolState:
        ours, theirs = socket.socketpair()
        self.started_at = time.monotonic()
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "omlx.enginehost.host", str(theirs.fileno())],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
            )
        finally:
            theirs.close()
        self.sock = ours
        try:
            ours.sendall(encode([self._init]))
            deadline = time.monotonic() + START_TIMEOUT_S
            ready: Ready | None = None
            while ready is None:
                for message in recv_batch_blocking(ours, max(1.0, deadline - time.monotonic())):
                    if isinstance(message, Ready):
                        ready = message
                    elif isinstance(message, LogRecordMsg):
                        reemit(message.record)
            log.info("engine process %d started", ready.pid)
            return ready.state
        except (WireClosed, OSError) as e:
            self.kill()
            code = self.proc.returncode if self.proc else None
            raise OmlxError(
                f"the engine process did not start (exit code {code}): {e}; see the log above"
            ) from e

    def exit_code(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def kill(self) -> None:
        if self.sock is not None:
            self.sock.close()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def wait(self, timeout_s: float) -> None:
        if self.proc is None:
            return
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            log.warning("engine process %d did not exit; killing it", self.proc.pid)
            self.kill()


class RemotePool:
    """omlx.engine.api.ModelPool over an engine process (see the module docstring)."""

    def __init__(self, settings: Settings, default: str, default_path: Path) -> None:
        self._process = EngineProcess(settings, default, default_path)
        self._state = self._process.start()
        self.cache: RemoteCache | None = RemoteCache(self) if settings.cache.enabled else None
        self._out: BatchWriter | None = None
        self._reader: asyncio.Task[None] | None = None
        # Each open stream's handler of the messages the child sends for it.
        self._streams: dict[RequestId, Callable[[Any], None]] = {}
        self._calls: dict[int, asyncio.Future[Reply]] = {}
        self._ids = itertools.count()
        self._closed: asyncio.Future[None] | None = None
        self._restart: asyncio.Task[None] | None = None
        self._is_closing = False

    # -- connection -------------------------------------------------------------------------

    async def start(self) -> None:
        """Attach to the running event loop (the app's startup); idempotent."""
        if self._out is not None or self._is_closing:
            return
        if self._process.sock is None or self._process.exit_code() is not None:
            raise EngineProcessGone("the engine process is not running", retry_after_s=5)
        reader, writer = await asyncio.open_unix_connection(sock=self._process.sock)
        self._out = BatchWriter(writer)
        self._reader = asyncio.create_task(self._read(reader), name="omlx-engine-reader")

    async def _read(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                for message in await read_batch(reader):
                    self._handle(message)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # WireClosed, or a frame that does not decode
            if not isinstance(e, WireClosed):
                log.exception("reading from the engine process failed")
            self._lost()

    def _handle(self, message: Any) -> None:
        if type(message) is tuple and message[0] == TOKEN_TAG:
            message = unpack_token(message)
        if isinstance(message, _STREAM_MESSAGES):
            on_message = self._streams.get(message.request_id)
            if on_message is not None:
                on_message(message)
        elif isinstance(message, Reply):
            if message.state is not None:
                self._state = message.state
            future = self._calls.pop(message.call_id, None)
            if future is not None and not future.done():
                future.set_result(message)
        elif isinstance(message, PoolState):
            self._state = message
        elif isinstance(message, LogRecordMsg):
            reemit(message.record)
        elif isinstance(message, Closed):
            self._settle_closed()

    def _settle_closed(self) -> None:
        if self._closed is not None and not self._closed.done():
            self._closed.set_result(None)

    def _lost(self) -> None:
        """The child is gone: fail what waits on it, and start another unless closing."""
        self._out = None
        self._settle_closed()
        if self._is_closing:
            return
        code = self._process.exit_code()
        log.error("the engine process exited (code %s); starting it again", code)
        error = EngineProcessGone(
            f"the engine process exited (code {code}) while this request ran; it is being "
            "restarted: retry shortly",
            retry_after_s=5,
        )
        for rid, on_message in list(self._streams.items()):
            on_message(GenerateFailed(rid, error))
        for future in self._calls.values():
            if not future.done():
                future.set_result(Reply(-1, False, error))
        self._calls.clear()
        self._process.kill()
        self._restart = asyncio.create_task(self._start_again())

    async def _start_again(self) -> None:
        wait_s = RESTART_BACKOFF_S - (time.monotonic() - self._process.started_at)
        if wait_s > 0:
            await asyncio.sleep(wait_s)
        try:
            self._state = await asyncio.to_thread(self._process.start)
            await self.start()
        except Exception:
            log.exception("starting the engine process again failed; next try at a request")

    async def _writer(self) -> BatchWriter:
        if self._out is None:
            if self._is_closing:
                raise EngineProcessGone("the server is shutting down", retry_after_s=5)
            if self._restart is not None and not self._restart.done():
                raise EngineProcessGone("the engine process is restarting", retry_after_s=5)
            if self._process.exit_code() is not None or self._process.sock is None:
                self._restart = asyncio.create_task(self._start_again())
                raise EngineProcessGone("the engine process is restarting", retry_after_s=5)
            await self.start()
        assert self._out is not None
        return self._out

    async def _call(self, target: str, method: str, *args: Any) -> Any:
        out = await self._writer()
        call_id = next(self._ids)
        future: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
        self._calls[call_id] = future
        out.send(Call(call_id, target, method, args))
        try:
            reply = await future
        finally:
            self._calls.pop(call_id, None)
        if not reply.ok:
            raise reply.value
        return reply.value

    # -- ModelPool ----------------------------------------------------------------------------

    async def generate(self, request: GenerationRequest) -> AsyncIterator[GenerationEvent]:
        out = await self._writer()
        rid = request.request_id
        queue: asyncio.Queue[Any] = asyncio.Queue()
        self._streams[rid] = queue.put_nowait
        out.send(Generate(request))
        finished = False
        try:
            while True:
                message = await queue.get()
                if isinstance(message, Ended):
                    finished = True
                    return
                if isinstance(message, GenerateFailed):
                    finished = True
                    raise message.error
                finished = isinstance(message, Done | Failed)
                yield message
        finally:
            self._streams.pop(rid, None)
            if not finished:
                self.cancel(rid)

    async def generate_into(
        self, request: GenerationRequest, deliver: Callable[[GenerationEvent], None]
    ) -> None:
        out = await self._writer()
        rid = request.request_id
        ended: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def on_message(message: Any) -> None:  # on the reader's turn: no task per token
            if ended.done():
                return
            if isinstance(message, Ended):
                ended.set_result(None)
            elif isinstance(message, GenerateFailed):
                ended.set_exception(message.error)
            else:
                deliver(message)
                if isinstance(message, Done | Failed):
                    ended.set_result(None)

        self._streams[rid] = on_message
        out.send(Generate(request))
        try:
            await ended
        finally:
            self._streams.pop(rid, None)
            if ended.cancelled() or not ended.done():
                self.cancel(rid)

    def cancel(self, request_id: RequestId) -> None:
        if self._out is not None:
            self._out.send(Cancel(request_id))

    def list_models(self) -> list[ModelInfo]:
        return self._state.models

    def stats(self) -> StatsSnapshot:
        return self._state.stats

    def status(self) -> PoolStatus:
        return self._state.status

    def model_state(self, name: str | None = None) -> tuple[str, str]:
        name = self._state.default_model if name is None else name
        return name, self._state.states.get(name, "available")

    async def count_tokens(self, request: GenerationRequest) -> int:
        return await self._call("pool", "count_tokens", request)

    async def embed(self, request: EmbeddingRequest) -> EmbeddingResult:
        return await self._call("pool", "embed", request)

    async def rerank(self, request: RerankRequest) -> RerankResult:
        return await self._call("pool", "rerank", request)

    async def prompt_logprobs(self, model: str, prompt: str, top_n: int) -> PromptLogprobs:
        return await self._call("pool", "prompt_logprobs", model, prompt, top_n)

    async def load(self, name: str) -> Any:
        return await self._call("pool", "load", name)

    async def unload(self, name: str) -> bool:
        return await self._call("pool", "unload", name)

    async def pin(self, name: str) -> None:
        await self._call("pool", "pin", name)

    async def unpin(self, name: str) -> None:
        await self._call("pool", "unpin", name)

    async def set_ttl(self, name: str | None, ttl_s: float | None) -> None:
        await self._call("pool", "set_ttl", name, ttl_s)

    async def close(self, grace_s: float = 5.0) -> None:
        """Let the child finish its streams for `grace_s`, spill its cache, and exit."""
        self._is_closing = True
        if self._restart is not None:
            self._restart.cancel()
        if self._out is not None:
            self._closed = asyncio.get_running_loop().create_future()
            self._out.send(Shutdown(grace_s))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._closed), grace_s + 60)
        if self._reader is not None:
            self._reader.cancel()
        await asyncio.to_thread(self._process.wait, 10.0)
        self._process.kill()


class RemoteCache:
    """omlx.engine.api.CacheAdmin for the engine process's tiered KV cache."""

    def __init__(self, pool: RemotePool) -> None:
        self._pool = pool

    async def report(self) -> CacheReport:
        return await self._pool._call("cache", "report")

    async def clear(self, model_fingerprint: str | None = None, tier: str = "all") -> int:
        return await self._pool._call("cache", "clear", model_fingerprint, tier)

    def close(self, spill: bool = True) -> None:
        """Nothing to do here: the engine process spills its cache when the pool closes."""
