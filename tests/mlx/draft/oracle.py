"""A drafter that proposes the target's own greedy continuation (optionally corrupted)."""

from __future__ import annotations

from collections.abc import Sequence

import mlx.core as mx


class OracleDrafter:
    """Proposes `continuation` exactly, except a wrong token at draft index `corrupt_at`.

    It also checks the loop's context contract: over a request, the context rows it
    receives always cover every committed token but the last (the block's first). With
    `pipelined` it also drafts the way the pipelined greedy loop asks (from a verify the
    host has not read: the block's position is a device value), and checks that the
    rows it is told to drop leave exactly the committed ones.
    """

    def __init__(
        self,
        prompt: Sequence[int],
        continuation: Sequence[int],
        vocab_size: int,
        draft_block_size: int = 16,
        corrupt_at: int | None = None,
        pipelined: bool = False,
        greedy: bool = True,
    ) -> None:
        self.prompt = list(prompt)
        self.continuation = list(continuation)
        self.vocab_size = vocab_size
        self.draft_block_size = draft_block_size
        self.corrupt_at = corrupt_at
        self.context_rows = 0
        self.calls = 0
        self.can_pipeline = pipelined
        self.pipelined_calls = 0
        self.greedy = greedy  # sampled runs commit other tokens than `continuation`

    def start(self) -> None:
        self.context_rows = 0
        self.calls = 0
        self.pipelined_calls = 0

    def propose(self, committed: Sequence[int], context: mx.array) -> mx.array:
        self.calls += 1
        self.context_rows += context.shape[1]
        assert self.context_rows == len(committed) - 1, "draft context must be committed only"
        assert list(committed[: len(self.prompt)]) == self.prompt
        done = len(committed) - len(self.prompt)
        ids = self.continuation[done : done + self.draft_block_size - 1]
        ids += [0] * (self.draft_block_size - 1 - len(ids))
        if self.corrupt_at is not None:
            ids[self.corrupt_at] = (ids[self.corrupt_at] + 1) % self.vocab_size
        logits = mx.full((len(ids), self.vocab_size), -30.0)
        logits[mx.arange(len(ids)), mx.array(ids)] = 30.0
        return logits

    def propose_pipelined(
        self, known: int, chunk: mx.array, num_valid: mx.array, anchor: mx.array
    ) -> mx.array:
        assert self.context_rows == known - 1, "the previous chunk's rejected rows were kept"
        self.calls += 1
        self.pipelined_calls += 1
        self.context_rows += chunk.shape[1]
        sequence = self.prompt + self.continuation
        # Checks only (a real drafter never reads these back): the anchor is the token
        # committed right after the chunk's valid rows.
        if self.greedy:
            assert anchor.item() == sequence[known - 1 + num_valid.item()]
        return self._logits_after(known - 1 + num_valid)

    def _logits_after(self, rows: mx.array) -> mx.array:
        """The block's logits when `rows` (a device count) tokens precede the anchor."""
        size = self.draft_block_size - 1
        padded = mx.array(self.continuation + [0] * (size + len(self.prompt + self.continuation)))
        done = rows - len(self.prompt) + 1  # continuation tokens through the anchor
        ids = padded[done + mx.arange(size)]
        if self.corrupt_at is not None:
            wrong = mx.arange(size) == self.corrupt_at
            ids = mx.where(wrong, (ids + 1) % self.vocab_size, ids)
        hit = mx.arange(self.vocab_size)[None] == ids[:, None]
        return mx.where(hit, 30.0, -30.0)

    def drop_context(self, num_rows: int) -> None:
        self.context_rows -= num_rows


class DeviceOracleDrafter(OracleDrafter):
    """The oracle for the loop that queues a cycle before reading the last one
    (async_loop.py): its context length is a device count, as the DFlash drafter's
    caches keep it, and every bound the loop settles must be that count."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, pipelined=True, **kwargs)
        self.rows = mx.array(0)
        self.settled: list[int] = []

    def start_device(self) -> None:
        self.rows = mx.array(0)

    def propose_committing(
        self, chunk: mx.array, num_valid: mx.array, anchor: mx.array
    ) -> mx.array:
        self.calls += 1
        self.pipelined_calls += 1
        self.rows = self.rows + num_valid  # committed rows before the anchor
        return self._logits_after(self.rows)

    def settle(self, bound: int) -> None:
        assert self.rows.item() == bound, "the loop's count of context rows is off"
        self.settled.append(bound)
