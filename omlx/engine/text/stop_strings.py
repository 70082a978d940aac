"""Stop strings on streamed text: never emit a stop string, hold back its possible prefixes."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class StopStringMatcher:
    """Feed text deltas; get back text that is safe to emit.

    Text that could still become a stop string is held back until the next
    delta decides it. Invariant: emitted + held == everything fed (until a stop).
    """

    stops: tuple[str, ...]
    held: str = ""
    stopped: bool = False
    matched: str | None = None  # the stop string that ended the stream
    _max_len: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self.stops = tuple(s for s in self.stops if s)
        self._max_len = max((len(s) for s in self.stops), default=0)

    def feed(self, text: str) -> str:
        """Returns the text to emit now; sets `stopped` when a stop string appeared."""
        if self.stopped:
            return ""
        if not self.stops:
            return text
        buf = self.held + text
        hit = self._first_stop(buf)
        if hit is not None:
            self.stopped, self.matched, self.held = True, hit[1], ""
            return buf[: hit[0]]
        keep = self._held_suffix_len(buf)
        self.held = buf[len(buf) - keep :] if keep else ""
        return buf[: len(buf) - keep]

    def flush(self) -> str:
        """The held-back text, once the stream ends without a stop string."""
        out, self.held = self.held, ""
        return "" if self.stopped else out

    def _first_stop(self, buf: str) -> tuple[int, str] | None:
        hits = [(i, s) for s in self.stops if (i := buf.find(s)) >= 0]
        return min(hits) if hits else None

    def _held_suffix_len(self, buf: str) -> int:
        # The longest suffix of buf that is a proper prefix of some stop string.
        for n in range(min(len(buf), self._max_len - 1), 0, -1):
            tail = buf[-n:]
            if any(s.startswith(tail) for s in self.stops):
                return n
        return 0
