"""Thinking budget bookkeeping: which token is forced when, for one- and multi-token markup."""

from __future__ import annotations

import pytest

from omlx.engine.text.parsers.budget import ThinkingBudget

OPEN, CLOSE = 1, 2


def drive(budget: ThinkingBudget, sampled: list[int]) -> list[int]:
    """Generate: take the forced token if any, else the next sampled one."""
    out: list[int] = []
    it = iter(sampled)
    while True:
        token = budget.next_forced()
        if token is None:
            token = next(it, None)
            if token is None:
                return out
        budget.observe(token)
        out.append(token)


def test_budget_closes_thinking_after_n_tokens() -> None:
    budget = ThinkingBudget(3, open_ids=[OPEN], close_ids=[CLOSE])
    assert drive(budget, [OPEN, 9, 9, 9, 9, 9, 7]) == [OPEN, 9, 9, 9, CLOSE, 9, 9, 7]
    assert budget.num_spent == 3


def test_natural_close_within_budget_forces_nothing() -> None:
    budget = ThinkingBudget(5, open_ids=[OPEN], close_ids=[CLOSE])
    assert drive(budget, [OPEN, 9, CLOSE, 7, 7, 7, 7, 7, 7]) == [OPEN, 9, CLOSE, *[7] * 6]


def test_no_thinking_means_no_forcing() -> None:
    budget = ThinkingBudget(1, open_ids=[OPEN], close_ids=[CLOSE])
    assert drive(budget, [7, 7, 7]) == [7, 7, 7]


def test_prompt_that_opened_thinking_counts_from_the_first_token() -> None:
    budget = ThinkingBudget(2, open_ids=[OPEN], close_ids=[CLOSE], starts_in_reasoning=True)
    assert drive(budget, [9, 9, 9]) == [9, 9, CLOSE, 9]


@pytest.mark.parametrize("spent", [0, 1])
def test_multi_token_close_markup_is_forced_in_order(spent: int) -> None:
    close = [40, 41, 42]
    budget = ThinkingBudget(spent, open_ids=[30, 31], close_ids=close)
    out = drive(budget, [30, 31, 9, 9])
    assert out[: 2 + spent] == [30, 31, *[9] * spent]
    assert out[2 + spent : 5 + spent] == close
    assert budget.next_forced() is None
