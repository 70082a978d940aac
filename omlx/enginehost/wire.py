"""Messages between `omlx serve` and its engine process, and how they travel (pure Python).

Both ends are the same program, started by the same user, joined by a socketpair no one
else holds, so messages are pickled: the engine's event dataclasses and OmlxErrors
cross as they are. Each write is one length-prefixed pickle of a *list* of messages:
the engine process sends one step's events for every stream in one write, not one per
token (the point of the split is to keep per-token work away from the engine's GIL).
"""

from __future__ import annotations

import asyncio
import pickle
import socket
import struct
from dataclasses import dataclass
from typing import Any

from omlx.engine.api import (
    GenerationRequest,
    ModelInfo,
    RequestId,
    Token,
)
from omlx.errors import OmlxError
from omlx.schemas.models import PoolStatus
from omlx.schemas.stats import StatsSnapshot

_HEADER = struct.Struct("!I")
# A batch is a step's events or one call's answer; anything near this is a bug.
MAX_FRAME_BYTES = 1 << 30


class WireClosed(ConnectionError):
    """The other end closed the socket (or died)."""


# -- front end -> engine process ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Init:
    """The first message: what the engine process serves."""

    settings_json: bytes  # msgspec JSON of Settings (secrets included: never on argv)
    default_model: str
    default_path: str


@dataclass(frozen=True, slots=True)
class Call:
    """Run `target.method(*args)` (target "pool" or "cache"); answered by a Reply."""

    call_id: int
    target: str
    method: str
    args: tuple[Any, ...] = ()


@dataclass(frozen=True, slots=True)
class Generate:
    request: GenerationRequest


@dataclass(frozen=True, slots=True)
class Cancel:
    request_id: RequestId


@dataclass(frozen=True, slots=True)
class Shutdown:
    """Close the pool (finishing streams get `grace_s`), spill the cache, then exit."""

    grace_s: float = 5.0


# -- engine process -> front end ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PoolState:
    """What the front end's synchronous pool methods answer from, pushed as it changes."""

    models: list[ModelInfo]
    status: PoolStatus
    stats: StatsSnapshot
    states: dict[str, str]  # model name -> loaded | loading | available
    default_model: str


@dataclass(frozen=True, slots=True)
class Ready:
    state: PoolState
    pid: int


@dataclass(frozen=True, slots=True)
class Reply:
    call_id: int
    ok: bool
    value: Any  # the result, or the exception when not ok
    state: PoolState | None = None  # fresh after calls that change what is loaded


@dataclass(frozen=True, slots=True)
class Ended:
    """`pool.generate` returned: no more events for this request (after Done or Failed).

    The events themselves travel as they are (GenerationEvents carry their request id)."""

    request_id: RequestId


@dataclass(frozen=True, slots=True)
class GenerateFailed:
    """`pool.generate` raised (before its first event, or between events)."""

    request_id: RequestId
    error: BaseException


@dataclass(frozen=True, slots=True)
class LogRecordMsg:
    """A log record of the engine process, re-emitted by the front end's logging."""

    record: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Closed:
    """Answer to Shutdown: the pool is closed and the cache spilled."""


# Token events, the bulk of the traffic, travel as tuples: pickling a slotted dataclass
# costs ~3 us, a tuple ~0.25 (measured), and this side of the wire holds the engines' GIL.
TOKEN_TAG = "t"


def pack_token(token: Token) -> tuple[Any, ...]:
    return (TOKEN_TAG, token.request_id, token.text, token.token_ids, token.reasoning,
            token.tool_calls, token.logprobs)  # fmt: skip


def unpack_token(packed: tuple[Any, ...]) -> Token:
    return Token(*packed[1:])


# -- framing ---------------------------------------------------------------------------


def portable_error(error: BaseException) -> BaseException:
    """`error` if it survives pickling, else an OmlxError that keeps its text."""
    try:
        pickle.loads(pickle.dumps(error))
    except Exception:
        return OmlxError(f"{type(error).__name__}: {error}")
    return error


def encode(messages: list[Any]) -> bytes:
    payload = pickle.dumps(messages, protocol=pickle.HIGHEST_PROTOCOL)
    return _HEADER.pack(len(payload)) + payload


def _check_size(size: int) -> int:
    if size > MAX_FRAME_BYTES:
        raise WireClosed(f"frame of {size} bytes: the stream is out of step")
    return size


async def read_batch(reader: asyncio.StreamReader) -> list[Any]:
    """The next batch of messages; WireClosed at the end of the stream."""
    try:
        head = await reader.readexactly(_HEADER.size)
        payload = await reader.readexactly(_check_size(_HEADER.unpack(head)[0]))
    except (asyncio.IncompleteReadError, ConnectionError) as e:
        raise WireClosed("the other end closed the connection") from e
    return pickle.loads(payload)


def recv_batch_blocking(sock: socket.socket, timeout_s: float | None) -> list[Any]:
    """`read_batch` on a plain socket (the front end waits for Ready before its loop runs)."""
    sock.settimeout(timeout_s)
    try:
        size = _check_size(_HEADER.unpack(_recv_exactly(sock, _HEADER.size))[0])
        return pickle.loads(_recv_exactly(sock, size))
    finally:
        sock.settimeout(None)


def _recv_exactly(sock: socket.socket, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            raise WireClosed("the other end closed the connection")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


class BatchWriter:
    """Queues messages and writes everything queued in one frame per event-loop turn."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer
        self._queued: list[Any] = []
        self._loop = asyncio.get_running_loop()
        self.closed = False

    def send(self, message: Any) -> None:
        if self.closed:
            return
        if not self._queued:
            self._loop.call_soon(self.flush)
        self._queued.append(message)

    def flush(self) -> None:
        if not self._queued or self.closed:
            return
        messages, self._queued = self._queued, []
        try:
            self._writer.write(encode(messages))
        except (ConnectionError, RuntimeError):  # the other end is gone; the reader sees it
            self.closed = True

    async def drain(self) -> None:
        self.flush()
        if not self.closed:
            try:
                await self._writer.drain()
            except ConnectionError:
                self.closed = True
