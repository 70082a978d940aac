"""ChildIndex: the longest shared start among the blocks stored after a chain position."""

from __future__ import annotations

import random

import pytest

from omlx.cache.chain_hash import BlockKey
from omlx.cache.child_index import ChildIndex, common_prefix_tokens, token_bytes


@pytest.mark.parametrize("seed", range(20))
def test_common_prefix_matches_a_plain_loop(seed: int) -> None:
    rng = random.Random(seed)
    a = [rng.randrange(1 << 40) for _ in range(rng.randrange(0, 300))]
    cut = rng.randrange(0, len(a) + 1)
    b = a[:cut] + [rng.randrange(1 << 40) for _ in range(rng.randrange(0, 50))]
    expect = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y),
                  min(len(a), len(b)))  # fmt: skip
    assert common_prefix_tokens(token_bytes(a), token_bytes(b)) == expect


def test_best_picks_the_longest_shared_start_and_ties_go_to_the_newest() -> None:
    index = ChildIndex()
    index.add("root", BlockKey("a"), [1, 2, 3, 4], partial=False)
    index.add("root", BlockKey("b"), [1, 2, 9], partial=True)
    index.add("root", BlockKey("c"), [1, 2, 3, 7, 7], partial=True)
    index.add("other", BlockKey("d"), [1, 2, 3, 4, 5], partial=True)
    child, n = index.best("root", [1, 2, 3, 7, 8])
    assert (child.key, n) == ("c", 4)
    child, n = index.best("root", [1, 2, 3, 4, 5])
    assert (child.key, n) == ("a", 4)
    child, n = index.best("root", [1, 2, 5])
    assert (child.key, n) == ("c", 2)  # a, b and c share two ids; c is the newest
    assert index.best("root", [5]) is None
    assert index.best("root", []) is None
    assert index.best("nowhere", [1]) is None


def test_a_longer_partial_supersedes_its_prefixes_and_covering_finds_the_cover() -> None:
    index = ChildIndex()
    index.add("root", BlockKey("short"), [1, 2], partial=True)
    index.add("root", BlockKey("elsewhere"), [5, 6], partial=True)
    dropped = index.add("root", BlockKey("long"), [1, 2, 3], partial=True)
    assert [c.key for c in dropped] == ["short"]
    assert "short" not in index and "elsewhere" in index
    assert index.covering("root", [1, 2]).key == "long"
    dropped = index.add("root", BlockKey("whole"), [1, 2, 3, 4], partial=False)
    assert [c.key for c in dropped] == ["long"]  # a whole block covers partials too
    assert index.covering("root", [1, 2, 3, 4]).key == "whole"
    assert index.covering("root", [1, 2, 3, 4, 5]) is None


def test_caps_drop_the_least_recently_used_and_report_only_partials() -> None:
    index = ChildIndex(max_per_anchor=2, max_entries=3)
    index.add("root", BlockKey("w"), [1], partial=False)
    index.add("root", BlockKey("p1"), [2], partial=True)
    index.touch(BlockKey("w"))
    assert [c.key for c in index.add("root", BlockKey("p2"), [3], partial=True)] == ["p1"]
    assert [c.key for c in index.children("root")] == ["w", "p2"]
    # A whole block dropped by a cap is forgotten here but not reported: the chain reaches it.
    assert index.add("x", BlockKey("p3"), [4], partial=True) == []
    assert index.add("y", BlockKey("p4"), [5], partial=True) == []  # total cap took "w"
    assert "w" not in index and len(index) == 3
    assert index.discard(BlockKey("p4")).key == "p4" and index.children("y") == []


def test_superseding_the_only_sibling_keeps_the_new_one_findable() -> None:
    index = ChildIndex()
    index.add("root", BlockKey("short"), [1, 2], partial=True)
    index.add("root", BlockKey("long"), [1, 2, 3], partial=True)
    assert [c.key for c in index.children("root")] == ["long"]
    assert index.best("root", [1, 2, 3])[0].key == "long"
