"""Longest reusable prefix: lazy matching, one token left to prefill, window/state rules."""

from __future__ import annotations

import pytest

from omlx.cache.chain_hash import BlockKey, iter_chain_keys
from omlx.cache.index import (
    BlockInfo,
    ReuseRule,
    longest_usable_prefix,
    match_chain,
    max_reusable_blocks,
)

B = 4


def _chain(n: int, window: set[int] | None = None, state: set[int] = frozenset()) -> list:
    return [
        BlockInfo(BlockKey(f"k{i}"), "fp", i, B, 10,
                  has_window=window is None or i in window, has_state=i in state)
        for i in range(n)
    ]  # fmt: skip


def test_match_stops_at_first_miss_without_hashing_further() -> None:
    seen: list[str] = []
    known = {f"k{i}" for i in (0, 1, 3)}

    def keys():
        for i in range(5):
            seen.append(f"k{i}")
            yield BlockKey(f"k{i}")

    found = match_chain(keys(), lambda k: BlockInfo(k, "fp", 0, B, 1) if k in known else None)
    assert [b.key for b in found] == ["k0", "k1"]
    assert seen == ["k0", "k1", "k2"]


@pytest.mark.parametrize(("num_tokens", "expected"), [(0, 0), (4, 0), (5, 1), (8, 1), (9, 2)])
def test_one_token_always_stays_to_prefill(num_tokens: int, expected: int) -> None:
    assert max_reusable_blocks(num_tokens, B) == expected


def test_full_attention_reuses_every_matched_block() -> None:
    rule = ReuseRule(B)
    assert longest_usable_prefix(_chain(5), 10, rule) == 5
    assert longest_usable_prefix(_chain(5), 3, rule) == 3
    assert longest_usable_prefix([], 3, rule) == 0


def test_recurrent_state_needs_a_snapshot_at_the_prefix_end() -> None:
    rule = ReuseRule(B, needs_state=True)
    assert longest_usable_prefix(_chain(6, state={2, 4}), 10, rule) == 5
    assert longest_usable_prefix(_chain(6, state={2, 4}), 4, rule) == 3
    assert longest_usable_prefix(_chain(6), 10, rule) == 0


def test_sliding_window_needs_the_window_blocks() -> None:
    rule = ReuseRule(B, window_tokens=8)  # the 2 blocks before the prefix end
    chain = _chain(9, window={7, 8})
    assert longest_usable_prefix(chain, 9, rule) == 9
    assert longest_usable_prefix(chain, 8, rule) == 0  # block 6 fell out of the window
    assert longest_usable_prefix(_chain(3, window={0, 1}), 3, rule) == 2
    assert longest_usable_prefix(_chain(1, window=set()), 1, rule) == 0


def test_lazy_keys_match_the_eager_ones() -> None:
    tokens = list(range(20))
    keys = list(iter_chain_keys("fp", tokens, B))
    found = match_chain(iter_chain_keys("fp", tokens, B), lambda k: BlockInfo(k, "fp", 0, B, 1))
    assert [b.key for b in found] == keys and len(keys) == 5
