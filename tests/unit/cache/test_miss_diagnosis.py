"""Where a prompt diverged from the closest stored prompt (pure Python)."""

from __future__ import annotations

from array import array

import pytest

from omlx.cache.miss_diagnosis import Divergence, RecentPrompts, common_prefix_length, describe


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ([], [1], 0),
        ([1, 2, 3], [1, 2, 3], 3),
        ([1, 2, 3], [1, 2], 2),
        ([1, 2, 3], [9, 2, 3], 0),
        (list(range(1000)), [*range(700), -1, *range(701, 1000)], 700),
        (list(range(600)), list(range(900)), 600),
    ],
)
def test_common_prefix_length(a: list[int], b: list[int], expected: int) -> None:
    assert common_prefix_length(array("i", a), b) == expected


def test_best_match_picks_the_longest_shared_head() -> None:
    recent = RecentPrompts()
    recent.add([1, 2, 3, 4, 5])
    recent.add([1, 2, 9, 9])
    assert recent.best_match([1, 2, 3, 7]) == Divergence(shared_tokens=3, stored_tokens=5)
    assert RecentPrompts().best_match([1]) is None


def test_bounded_by_count_and_tokens() -> None:
    recent = RecentPrompts(max_prompts=2, max_tokens=10)
    recent.add([1] * 4)
    recent.add([2] * 4)
    recent.add([3] * 4)  # the first one leaves (count)
    assert recent.best_match([1]).shared_tokens == 0
    recent.add([4] * 8)  # 4 + 8 > 10: only the newest stays
    assert recent.best_match([3]).shared_tokens == 0
    assert recent.best_match([4, 4]).shared_tokens == 2
    recent.add([5] * 11)  # larger than the whole budget: never kept
    assert recent.best_match([5]).shared_tokens == 0


def test_describe_names_the_divergence_point() -> None:
    text = describe(Divergence(shared_tokens=300, stored_tokens=900), 1000, 256, 256)
    assert "shares the first 300 tokens" in text
    assert "diverges at token 300, block 1" in text and "reused 256" in text
