"""Hot tier LRU with block_size=4: order, budget and evictions after each step."""

from __future__ import annotations

from omlx.cache.chain_hash import BlockKey
from omlx.cache.hot_tier import HotBlock, HotTier
from omlx.cache.index import BlockInfo


def _block(name: str, nbytes: int = 100) -> HotBlock:
    info = BlockInfo(BlockKey(name), "fp", 0, 4, nbytes)
    return HotBlock(info=info)


def test_lru_order_and_budget_each_step() -> None:
    evicted: list[str] = []
    hot = HotTier(300, on_evict=lambda b: evicted.append(b.key))
    assert hot.insert(_block("a")) == []
    assert hot.insert(_block("b")) == []
    assert hot.insert(_block("c")) == []
    assert (hot.keys(), hot.num_bytes) == (["a", "b", "c"], 300)

    assert hot.get(BlockKey("a")) is not None  # a becomes most recent
    assert hot.keys() == ["b", "c", "a"]
    assert hot.peek(BlockKey("b")) is not None  # peek keeps the order
    assert hot.keys() == ["b", "c", "a"]

    assert hot.insert(_block("d")) == ["b"]
    assert (hot.keys(), hot.num_bytes, evicted) == (["c", "a", "d"], 300, ["b"])

    assert hot.insert(_block("e", 250)) == ["c", "a", "d"]
    assert (hot.keys(), hot.num_bytes) == (["e"], 250)
    assert evicted == ["b", "c", "a", "d"]


def test_reinsert_replaces_and_oversized_goes_straight_out() -> None:
    evicted: list[str] = []
    hot = HotTier(300, on_evict=lambda b: evicted.append(b.key))
    hot.insert(_block("a"))
    hot.insert(_block("b"))
    hot.insert(_block("a", 150))  # replaced, moved to the end, bytes recounted
    assert (hot.keys(), hot.num_bytes) == (["b", "a"], 250)
    assert hot.insert(_block("huge", 301)) == ["huge"]
    assert (hot.keys(), hot.num_bytes, evicted) == (["b", "a"], 250, ["huge"])


def test_zero_budget_and_clear() -> None:
    evicted: list[str] = []
    hot = HotTier(0, on_evict=lambda b: evicted.append(b.key))
    hot.insert(_block("a"))
    assert (len(hot), evicted) == (0, ["a"])

    hot = HotTier(1000)
    hot.insert(_block("a"))
    other = _block("x")
    other.info = BlockInfo(BlockKey("x"), "other-model", 0, 4, 100)
    hot.insert(other)
    assert hot.clear("fp") == 1
    assert (hot.keys(), hot.num_bytes) == (["x"], 100)
    assert hot.remove(BlockKey("x")) is not None and hot.num_bytes == 0
