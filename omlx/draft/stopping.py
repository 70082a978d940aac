"""When a DFlash request ends: EOS, max_tokens or a stop string (pure Python)."""

from __future__ import annotations

from collections.abc import Callable, Sequence


class StopCondition:
    """Fed one emitted token at a time; says whether generation ends after it.

    EOS tokens end generation and are not emitted (`accept` returns False for them).
    A token that completes a stop string is emitted and ends generation: trimming the
    stop string from the text is the detokenizer's job, as on the batched path.
    """

    def __init__(
        self,
        *,
        max_tokens: int,
        eos_token_ids: Sequence[int] = (),
        stop: Sequence[str] = (),
        decode: Callable[[list[int]], str] | None = None,
    ) -> None:
        if stop and decode is None:
            raise ValueError("stop strings need a decode function")
        self.max_tokens = max_tokens
        self.eos_token_ids = frozenset(eos_token_ids)
        self.stop = tuple(s for s in stop if s)
        self._decode = decode
        self.tokens: list[int] = []
        self.finish_reason: str | None = None
        self._longest_stop = max((len(s) for s in self.stop), default=0)

    @property
    def done(self) -> bool:
        return self.finish_reason is not None

    @property
    def remaining(self) -> int:
        return self.max_tokens - len(self.tokens)

    def accept(self, token: int) -> bool:
        """Record `token`; True when it is to be emitted."""
        if self.done:
            return False
        if token in self.eos_token_ids:
            self.finish_reason = "stop"
            return False
        self.tokens.append(token)
        if self.stop and self._hits_stop():
            self.finish_reason = "stop"
        elif len(self.tokens) >= self.max_tokens:
            self.finish_reason = "length"
        return True

    def _hits_stop(self) -> bool:
        assert self._decode is not None
        # Only the tail can hold a stop string completed by the newest token; a token
        # decodes to at least one character, so the tail needs at most this many.
        tail = self._decode(self.tokens[-(self._longest_stop + 8) :])
        return any(s in tail for s in self.stop)
