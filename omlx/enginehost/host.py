"""The engine process: `omlx serve`'s models, engines and KV cache behind a socket.

    python -m omlx.enginehost.host FD

FD is this end of a socketpair `omlx serve` made (omlx/enginehost/client.py). The HTTP
front end stays in the parent, so per-token work (SSE framing, JSON, the ASGI server)
runs under the parent's GIL, not the one this process's engine threads need between
MLX calls. What is left here per token is the reasoning/tool-call parser, run inside
the engine's once-a-step hand-off (`LocalModelPool.generate_into`: no task is woken per
token), and the pickling; events leave in one write per event-loop turn.

This process ignores SIGINT and SIGTERM: a Ctrl-C reaches the whole process group, and
the front end, not the signal, decides when the engines stop (after its streams drain).
It exits when told to, or when the socket closes (the front end died).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import signal
import socket
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

import msgspec

from omlx.engine.api import (
    Done,
    Failed,
    GenerationEvent,
    GenerationRequest,
    RequestId,
    Started,
    Token,
)
from omlx.enginehost.build import build_pool
from omlx.enginehost.wire import (
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
    pack_token,
    portable_error,
    read_batch,
)
from omlx.platform.blas import reexec_with_blas
from omlx.settings import Settings

log = logging.getLogger(__name__)

# What the front end may call, by target; anything else is refused.
CALLABLE = {
    "pool": frozenset(
        {
            "load", "unload", "pin", "unpin", "set_ttl", "count_tokens", "embed", "rerank",
            "prompt_logprobs",
        }
    ),
    "cache": frozenset({"report", "clear"}),
}  # fmt: skip
CHANGES_STATE = frozenset({"load", "unload", "pin", "unpin", "set_ttl"})
STATE_EVERY_S = 0.5  # the front end's stats, status and model list are at most this old
STATE_AFTER_CHANGE_S = 0.05  # a request started or ended: push within this


class EngineHost:
    """Serves one front end: generations stream out, calls are answered, state is pushed."""

    def __init__(self, pool: Any, cache: Any, out: BatchWriter) -> None:
        self.pool = pool
        self.cache = cache
        self.out = out
        self._tasks: dict[RequestId, asyncio.Task[None]] = {}
        self._calls: set[asyncio.Task[None]] = set()  # referenced until they finish
        self._state_pending = False

    def state(self) -> PoolState:
        models = self.pool.list_models()
        default, default_state = self.pool.model_state()
        states = {m.id: self.pool.model_state(m.id)[1] for m in models}
        if default:
            states[default] = default_state
        return PoolState(
            models=models,
            status=self.pool.status(),
            stats=self.pool.stats(),
            states=states,
            default_model=default,
        )

    async def run(self, reader: asyncio.StreamReader) -> None:
        pusher = asyncio.create_task(self._push_state())
        try:
            while True:
                try:
                    batch = await read_batch(reader)
                except WireClosed:
                    log.warning("the front end went away; closing the engines")
                    await self._close(grace_s=0)
                    return
                for message in batch:
                    if isinstance(message, Shutdown):
                        await self._close(message.grace_s)
                        self.out.send(Closed())
                        await self.out.drain()
                        return
                    self._dispatch(message)
        finally:
            pusher.cancel()

    def _dispatch(self, message: Any) -> None:
        if isinstance(message, Generate):
            rid = message.request.request_id
            self._tasks[rid] = asyncio.create_task(self._generate(message.request))
        elif isinstance(message, Cancel):
            self.pool.cancel(message.request_id)
            task = self._tasks.get(message.request_id)
            if task is not None:
                task.cancel()
        elif isinstance(message, Call):
            task = asyncio.create_task(self._call(message))
            self._calls.add(task)
            task.add_done_callback(self._calls.discard)
        else:
            log.error("unknown message from the front end: %r", type(message).__name__)

    async def _generate(self, request: GenerationRequest) -> None:
        rid = request.request_id
        try:
            await self.pool.generate_into(request, self._forward)
            self.out.send(Ended(rid))
        except asyncio.CancelledError:
            pass  # the front end cancelled: nobody reads this stream any more
        except Exception as e:
            self.out.send(GenerateFailed(rid, portable_error(e)))
        finally:
            self._tasks.pop(rid, None)

    def _forward(self, event: GenerationEvent) -> None:
        """Called by the engine's hand-off on this loop, for each parsed event."""
        if type(event) is Token:
            self.out.send(pack_token(event))
            return
        if isinstance(event, Failed):
            event = Failed(event.request_id, portable_error(event.error))
        self.out.send(event)
        if isinstance(event, Started | Done | Failed):
            self._state_changed()

    async def _call(self, call: Call) -> None:
        try:
            if call.method not in CALLABLE.get(call.target, ()):
                raise ValueError(f"{call.target}.{call.method} cannot be called remotely")
            target = self.pool if call.target == "pool" else self.cache
            if target is None:
                raise ValueError(f"no {call.target} in this engine process")
            fn = getattr(target, call.method)
            if inspect.iscoroutinefunction(fn):
                value = await fn(*call.args)
            else:  # the cache's calls block (disk): not on this loop
                value = await asyncio.to_thread(fn, *call.args)
            if call.method == "load":
                value = None  # the engine itself stays in this process
            reply = Reply(call.call_id, True, value, self._state_after(call))
        except Exception as e:
            reply = Reply(call.call_id, False, portable_error(e), self._state_after(call))
        self.out.send(reply)

    def _state_after(self, call: Call) -> PoolState | None:
        """Fresh state with the answers that change what is loaded or pinned (the caller
        reads it next: the admin's status, /ready); after other calls (an embedding may
        load its model) one push follows within STATE_AFTER_CHANGE_S, however many calls
        there were (reading the state costs ~1.5 ms of this loop: not per request)."""
        if call.method in CHANGES_STATE:
            return self.state()
        self._state_changed()
        return None

    def _state_changed(self) -> None:
        if not self._state_pending:
            self._state_pending = True
            asyncio.get_running_loop().call_later(STATE_AFTER_CHANGE_S, self._send_state)

    def _send_state(self) -> None:
        self._state_pending = False
        try:
            self.out.send(self.state())
        except Exception:
            log.exception("reading the pool's state failed")

    async def _push_state(self) -> None:
        while True:
            await asyncio.sleep(STATE_EVERY_S)
            self._send_state()

    async def _close(self, grace_s: float) -> None:
        await self.pool.close(grace_s)
        for task in list(self._tasks.values()):
            task.cancel()
        if self.cache is not None:
            await asyncio.to_thread(self.cache.close)


class ForwardLogs(logging.Handler):
    """Sends this process's log records to the front end, which logs them as its own
    (console, the admin's log view); from any thread."""

    def __init__(self, loop: asyncio.AbstractEventLoop, out: BatchWriter) -> None:
        super().__init__()
        self._loop = loop
        self._loop_thread = threading.get_ident()
        self._out = out

    def emit(self, record: logging.LogRecord) -> None:
        try:
            data = {
                "name": record.name,
                "levelno": record.levelno,
                "levelname": record.levelname,
                "msg": record.getMessage(),
                "created": record.created,
                "threadName": record.threadName,
                "exc_text": "".join(traceback.format_exception(*record.exc_info))
                if record.exc_info
                else None,
            }
            if threading.get_ident() == self._loop_thread:  # in order with what it sends
                self._out.send(LogRecordMsg(data))
            else:
                self._loop.call_soon_threadsafe(self._out.send, LogRecordMsg(data))
        except RuntimeError:  # the loop is closed: the process is on its way out
            sys.stderr.write(f"{record.levelname} {record.name}: {record.getMessage()}\n")
        except Exception:
            self.handleError(record)


async def serve(sock: socket.socket) -> None:
    reader, writer = await asyncio.open_unix_connection(sock=sock)
    out = BatchWriter(writer)
    init: Init = (await read_batch(reader))[0]
    settings = msgspec.json.decode(init.settings_json, type=Settings)
    root = logging.getLogger()
    root.handlers[:] = [ForwardLogs(asyncio.get_running_loop(), out)]
    root.setLevel(settings.log.level)
    pool, cache = build_pool(settings, init.default_model, Path(init.default_path))
    host = EngineHost(pool, cache, out)
    out.send(Ready(host.state(), os.getpid()))
    started = time.monotonic()
    await host.run(reader)
    log.debug("engine process served for %.0f s", time.monotonic() - started)
    await out.drain()
    writer.close()


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    reexec_with_blas()  # a no-op when `omlx serve` already runs on it (the environment says)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    sock = socket.socket(fileno=int(args[0]))
    asyncio.run(serve(sock))


if __name__ == "__main__":
    main()
