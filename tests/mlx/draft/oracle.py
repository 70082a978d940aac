"""A drafter that proposes the target's own greedy continuation (optionally corrupted)."""

from __future__ import annotations

from collections.abc import Sequence

import mlx.core as mx


class OracleDrafter:
    """Proposes `continuation` exactly, except a wrong token at draft index `corrupt_at`.

    It also checks the loop's context contract: over a request, the context rows it
    receives always cover every committed token but the last (the block's first).
    """

    def __init__(
        self,
        prompt: Sequence[int],
        continuation: Sequence[int],
        vocab_size: int,
        draft_block_size: int = 16,
        corrupt_at: int | None = None,
    ) -> None:
        self.prompt = list(prompt)
        self.continuation = list(continuation)
        self.vocab_size = vocab_size
        self.draft_block_size = draft_block_size
        self.corrupt_at = corrupt_at
        self.context_rows = 0
        self.calls = 0

    def start(self) -> None:
        self.context_rows = 0
        self.calls = 0

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
