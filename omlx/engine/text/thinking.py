"""Thinking budgets: close the reasoning block once it spent its tokens (pure Python).

The engine thread feeds every generated token to `observe`; a logits processor built
from the budget (sampling.forcing_processor) then forces the end-of-thinking tokens, one
per step. Observation lags sampling by one step, so up to one token more is spent.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class ThinkBudget:
    budget_tokens: int
    start_id: int | None
    end_tokens: tuple[int, ...]
    in_reasoning: bool
    spent_tokens: int = 0
    closed: bool = False
    forced: deque[int] = field(default_factory=deque)

    def __post_init__(self) -> None:
        if self.in_reasoning and self.budget_tokens <= 0:
            self._close()

    def observe(self, token: int) -> None:
        if self.closed:
            return
        if not self.in_reasoning:
            self.in_reasoning = token == self.start_id
            return
        if token == self.end_tokens[-1]:  # the model closed it itself
            self.closed = True
            return
        self.spent_tokens += 1
        if self.spent_tokens >= self.budget_tokens:
            self._close()

    def next_forced(self) -> int | None:
        return self.forced.popleft() if self.forced else None

    def _close(self) -> None:
        self.closed = True
        self.forced.extend(self.end_tokens)


def make_think_budget(
    tokenizer: Any, budget_tokens: int | None, prompt_ends_in_think: bool
) -> ThinkBudget | None:
    """A budget for models whose tokenizer knows its thinking markup, else None."""
    if budget_tokens is None or not getattr(tokenizer, "has_thinking", False):
        return None
    end = tuple(getattr(tokenizer, "think_end_tokens", None) or ())
    if not end:
        return None
    return ThinkBudget(
        budget_tokens=budget_tokens,
        start_id=getattr(tokenizer, "think_start_id", None),
        end_tokens=end,
        in_reasoning=prompt_ends_in_think,
    )
