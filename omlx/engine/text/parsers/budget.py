"""Thinking budget (Anthropic `budget_tokens`): when to force the end-of-thinking tokens.

Pure token bookkeeping; the engine wraps it in a logits processor that, whenever
`next_forced` returns an id, masks every other token (so the model "chooses" it).
"""

from __future__ import annotations


class ThinkingBudget:
    """Counts generated tokens inside the reasoning block and closes it when spent.

    Args:
        budget_tokens: tokens allowed inside the block (the closing tokens not counted).
        open_ids / close_ids: token ids of `<think>` / `</think>` (one special token in
            Qwen3-style vocabularies, several BPE pieces elsewhere).
        starts_in_reasoning: the prompt already opened the block.
    """

    def __init__(
        self,
        budget_tokens: int,
        *,
        open_ids: list[int],
        close_ids: list[int],
        starts_in_reasoning: bool = False,
    ) -> None:
        assert close_ids, "the end-of-thinking markup must have token ids"
        self.budget_tokens = budget_tokens
        self._open = list(open_ids)
        self._close = list(close_ids)
        self._in_reasoning = starts_in_reasoning
        self._is_closed = False
        self._num_spent = 0
        self._recent: list[int] = []
        self._forcing: list[int] = []

    @property
    def num_spent(self) -> int:
        return self._num_spent

    def observe(self, token_id: int) -> None:
        """Record one generated token (forced ones included)."""
        self._recent = [*self._recent, token_id][-max(len(self._open), len(self._close)) :]
        if self._forcing and token_id == self._forcing[0]:
            self._forcing.pop(0)
        if self._is_closed:
            return
        if not self._in_reasoning:
            if self._open and self._recent[-len(self._open) :] == self._open:
                self._in_reasoning = True
            return
        if self._recent[-len(self._close) :] == self._close:
            self._is_closed = True
            self._forcing = []
            return
        self._num_spent += 1

    def next_forced(self) -> int | None:
        """The token the next step must produce, or None to sample freely."""
        if self._is_closed or not self._in_reasoning:
            return None
        if not self._forcing and self._num_spent >= self.budget_tokens:
            self._forcing = list(self._close)
        return self._forcing[0] if self._forcing else None
