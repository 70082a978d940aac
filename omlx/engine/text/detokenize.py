"""Per-request incremental detokenization with stop strings (pure Python, no MLX).

Runs on the engine thread, because a stop string must end the sequence there.
"""

from __future__ import annotations

from typing import Protocol

from omlx.engine.text.stop_strings import StopStringMatcher


class StreamingDetokenizer(Protocol):
    """mlx-lm's streaming detokenizer interface (duck-typed)."""

    def add_token(self, token: int) -> None: ...

    def finalize(self) -> None: ...

    @property
    def last_segment(self) -> str: ...


class TextStream:
    """Token ids in, emittable text out; `stopped` once a stop string appeared."""

    __slots__ = ("_detok", "_stops")

    def __init__(self, detokenizer: StreamingDetokenizer, stop: list[str]) -> None:
        self._detok = detokenizer
        self._stops = StopStringMatcher(tuple(stop))

    @property
    def stopped(self) -> bool:
        return self._stops.stopped

    @property
    def matched_stop(self) -> str | None:
        return self._stops.matched

    def add(self, token: int) -> str:
        self._detok.add_token(token)
        return self._stops.feed(self._detok.last_segment)

    def finish(self) -> str:
        """Flush the detokenizer and the held-back text at the end of the stream.

        The detokenizer holds back bytes of a character not yet complete; when max_tokens
        ends the stream inside one, its flush decodes them as U+FFFD. They are dropped:
        a client must never get half a character shown as a replacement mark.
        """
        self._detok.finalize()
        tail = self._detok.last_segment.rstrip("\ufffd")
        return self._stops.feed(tail) + self._stops.flush()
