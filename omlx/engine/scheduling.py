"""Scheduling policy of one engine (pure Python): prefill pacing and the uid adapter."""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field

from omlx.engine.api import RequestId

PRIOR_TOKENS_PER_DECODE_STEP = 64
CLIMB_SAMPLES = 6  # steps measured per chunk unit before deciding to double it
CLIMB_GAIN = 0.8  # doubling the unit must cut the per-token cost at least this much
MAX_SPIKE_DECODE_STEPS = 3.0  # a unit's prefill costs at most this many decode steps
RECLIMB_EVERY_STEPS = 64  # then the unit is re-measured (and may grow again)
WINDOW_STEPS = 48  # recent decode-only steps the decode cost is the median of
MIXED_WINDOW_STEPS = 48  # recent prefill steps the token cost is averaged over
MIN_DECODE_SAMPLES = 5  # below this, every other step is decode-only (to measure it)
PROBE_EVERY_STEPS = 8  # then one step in this many, to follow the decode cost as it drifts


@dataclass(slots=True)
class PrefillPacer:
    """Sizes each step's prefill chunk so prefill takes `share` of a step's time.

    Every engine step runs one decode step for the running streams plus one prefill
    chunk. From measured wall times (robust to MLX's async pipelining, which moves decode
    work into whichever call evaluates next): decode_s is the median of recent
    decode-only steps; token_s is what recent chunks cost per token beyond that, as a
    ratio of sums over a window (per-call overhead included, so the chunk size settles
    where prefill uses exactly its budget; sums, not per-step ratios, so noise averages
    out). Fractions of a token carry over between steps: on a compute-bound CPU, where a
    prompt token costs about what a decoding stream's token does, some steps prefill
    nothing. Chunks come in multiples of a unit that grows while larger chunks are
    cheaper per token (_climb). With nothing decoding, prefill gets the largest chunk.
    """

    share: float
    max_chunk_tokens: int
    decode_s: float | None = None
    token_s: float | None = None  # per prompt token, call overhead included
    credit_tokens: float = 0.0  # prefill budget carried over from earlier steps
    _decode: deque[float] = field(default_factory=lambda: deque(maxlen=WINDOW_STEPS))
    _mixed: deque[tuple[int, float]] = field(
        default_factory=lambda: deque(maxlen=MIXED_WINDOW_STEPS)
    )
    _num_decoding: int = 0
    _steps: int = 0
    unit: int = 1  # chunks are multiples of this (see _climb)
    _trial: int | None = None  # a unit being tried
    _climb_done: bool = False
    _climb_done_at: int = 0
    _unit_cost: dict[int, tuple[float, int]] = field(default_factory=dict)

    def chunk_tokens(self, *, num_decoding: int, num_prefilling: int) -> int:
        """Prompt tokens per prefilling sequence for the next step (0: decode only)."""
        if num_decoding == 0 or num_prefilling == 0 or self.share >= 1.0:
            self.credit_tokens = 0.0  # no budget saved up while nothing waits to prefill
            return self.max_chunk_tokens
        self._track(num_decoding)
        self._steps += 1
        if self.decode_s is None:
            return 0  # a decode-only step first: what the streams' step costs alone
        # Unmeasured, assume a prompt token costs 1/64 of a decode step: a chunk big
        # enough that its measured cost stands out of the step-time noise.
        token_s = self.token_s or self.decode_s / PRIOR_TOKENS_PER_DECODE_STEP
        budget_s = self.decode_s * self.share / (1.0 - self.share)
        self.credit_tokens += budget_s / (token_s * max(num_prefilling, 1))
        probe_every = 2 if len(self._decode) < MIN_DECODE_SAMPLES else PROBE_EVERY_STEPS
        if self._steps % probe_every == 0:
            return 0  # now and then decode only, to follow its cost (the budget carries over)
        if self._climb_done and self._steps - self._climb_done_at > RECLIMB_EVERY_STEPS:
            self._climb_done, self._unit_cost = False, {}  # costs drift: measure again
        unit = self._trial or self.unit
        self.credit_tokens = min(self.credit_tokens, max(self.max_chunk_tokens, unit))
        whole = min(self.max_chunk_tokens, int(self.credit_tokens // unit) * unit)
        self.credit_tokens -= whole
        return whole

    def observe(self, *, step_s: float, num_decoding: int, prefill_tokens: int) -> None:
        """Record one step's wall time and what it did."""
        if not num_decoding:
            return  # the chunk is then the largest anyway
        self._track(num_decoding)
        if not prefill_tokens:
            self._decode.append(step_s)
            self.decode_s = statistics.median(self._decode)  # robust to load spikes
        else:
            self._mixed.append((prefill_tokens, step_s))
            if self.decode_s is not None:
                self._climb(prefill_tokens, step_s - self.decode_s)
        if self.decode_s is not None and self._mixed:
            # Beyond the current decode estimate, what the window's chunks cost per token.
            extra_s = sum(t for _, t in self._mixed) - self.decode_s * len(self._mixed)
            self.token_s = max(extra_s / sum(n for n, _ in self._mixed), 1e-7)

    def _climb(self, tokens: int, extra_s: float) -> None:
        """Grow the chunk unit while doubling it cuts the per-token cost by a fifth.

        A prefill call re-reads every weight, so on a memory-bound device a 1-token chunk
        costs about a decode step; rarer, larger chunks then prefill several times faster
        within the same time share. A unit's cost may not exceed MAX_SPIKE_DECODE_STEPS
        decode steps: one step in a few then pays a bounded inter-token gap.
        """
        if self._climb_done or tokens not in (self.unit, self._trial):
            return
        total_s, count = self._unit_cost.get(tokens, (0.0, 0))
        self._unit_cost[tokens] = (total_s + extra_s, count + 1)
        if count + 1 < CLIMB_SAMPLES:
            return
        cost = (total_s + extra_s) / (count + 1) / tokens  # per token, at this unit
        if self._trial is None:  # the unit is measured: try twice as large
            fits = 2 * tokens * cost <= MAX_SPIKE_DECODE_STEPS * (self.decode_s or 0.0)
            if fits and 2 * tokens <= self.max_chunk_tokens:
                self._trial = 2 * tokens
            else:
                self._stop_climbing()
            return
        base_s, base_n = self._unit_cost[self.unit]
        if cost < CLIMB_GAIN * base_s / base_n / self.unit:
            self.unit = self._trial  # worth it: keep climbing from here
        else:
            self._stop_climbing()
        self._trial = None

    def _stop_climbing(self) -> None:
        self._climb_done, self._climb_done_at = True, self._steps

    def _track(self, num_decoding: int) -> None:
        if num_decoding != self._num_decoding:  # the decode cost changed with the batch
            self._decode.clear()
            self._num_decoding = num_decoding


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
