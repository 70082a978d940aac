"""Scheduling policy of one engine (pure Python): prefill pacing and the uid adapter."""

from __future__ import annotations

from dataclasses import dataclass, field

from omlx.engine.api import RequestId

# Unmeasured, a step prefills this little: the first steps measure what prefill costs.
FIRST_CHUNK_TOKENS = 1
_EMA = 0.3  # weight of the newest sample in the running estimates


@dataclass(slots=True)
class PrefillPacer:
    """Sizes each step's prefill chunk so prefill takes `share` of a step's time.

    Every engine step runs one decode step for the running streams plus one
    prefill chunk. Modelled as `step_s = decode_s + prefill_token_s * tokens`,
    both estimated from measured wall time (robust to MLX's async pipelining,
    which moves decode work into whichever call evaluates next). With nothing
    decoding, prefill gets the largest chunk. When the budget is under one token
    per step (a compute-bound CPU, where a prompt token costs about what a
    decoding stream's token does), it accumulates: some steps prefill nothing.
    """

    share: float
    max_chunk_tokens: int
    decode_s: float | None = None
    prefill_token_s: float | None = None
    credit_tokens: float = 0.0  # prefill budget carried over from earlier steps

    def chunk_tokens(self, *, num_decoding: int, num_prefilling: int) -> int:
        """Prompt tokens per prefilling sequence for the next step (0: decode only)."""
        if num_decoding == 0 or self.share >= 1.0:
            self.credit_tokens = 0.0
            return self.max_chunk_tokens
        if self.decode_s is None or self.prefill_token_s is None:
            return FIRST_CHUNK_TOKENS  # measure before spending decode time
        budget_s = self.decode_s * self.share / (1.0 - self.share)
        per_seq = budget_s / (self.prefill_token_s * max(num_prefilling, 1))
        if per_seq >= 1.0:
            self.credit_tokens = 0.0
            return int(min(self.max_chunk_tokens, per_seq))
        self.credit_tokens += per_seq
        whole = int(self.credit_tokens)
        self.credit_tokens -= whole
        return whole

    def observe(self, *, step_s: float, num_decoding: int, prefill_tokens: int) -> None:
        """Record one step's wall time and what it did."""
        if num_decoding and not prefill_tokens:
            self.decode_s = _ema(self.decode_s, step_s)
            return
        if not prefill_tokens:
            return
        decode_s = (self.decode_s or 0.0) if num_decoding else 0.0
        per_token = max(step_s - decode_s, 0.0) / prefill_tokens
        self.prefill_token_s = _ema(self.prefill_token_s, max(per_token, 1e-7))


def _ema(old: float | None, new: float) -> float:
    return new if old is None else (1 - _EMA) * old + _EMA * new


@dataclass(slots=True)
class UidMap:
    """The one adapter between BatchGenerator uids and request ids."""

    _by_uid: dict[int, RequestId] = field(default_factory=dict)
    _by_request: dict[RequestId, int] = field(default_factory=dict)

    def add(self, uid: int, request_id: RequestId) -> None:
        self._by_uid[uid] = request_id
        self._by_request[request_id] = uid

    def request(self, uid: int) -> RequestId | None:
        return self._by_uid.get(uid)

    def uid(self, request_id: RequestId) -> int | None:
        return self._by_request.get(request_id)

    def pop(self, request_id: RequestId) -> int | None:
        uid = self._by_request.pop(request_id, None)
        if uid is not None:
            self._by_uid.pop(uid, None)
        return uid

    def __len__(self) -> int:
        return len(self._by_uid)
