"""Token-level reuse below one block: which blocks follow a chain position, and their tokens.

The chain hash (chain_hash.py) finds whole blocks only. A prompt that diverges inside a
block, or one shorter than a block (a chat template's system head is ~25 tokens), would
reuse nothing of the tokens it shares past the last whole block. This index remembers, per
chain position ("anchor": the key of the block before, or a root anchor), the blocks stored
after it with their token ids, so a prompt can take the longest common prefix of one.

Those blocks are whole blocks, or a sequence's unfilled last block ("partial": RAM only,
reachable through here alone). Pure Python; one per model, used on its engine thread.
"""

from __future__ import annotations

from array import array
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from omlx.cache.chain_hash import BlockKey

_ITEM = array("q").itemsize


def token_bytes(tokens: Sequence[int]) -> bytes:
    return array("q", tokens).tobytes()


def common_prefix_tokens(a: bytes, b: bytes) -> int:
    """Length in tokens of the common prefix of two `token_bytes` (binary search on slices:
    a handful of C-speed compares instead of a Python loop over tokens)."""
    lo, hi = 0, min(len(a), len(b)) // _ITEM
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[: mid * _ITEM] == b[: mid * _ITEM]:
            lo = mid
        else:
            hi = mid - 1
    return lo


@dataclass(slots=True)
class Child:
    key: BlockKey
    anchor: str
    tokens: bytes  # token_bytes of the block's ids
    partial: bool

    @property
    def num_tokens(self) -> int:
        return len(self.tokens) // _ITEM


class ChildIndex:
    """Blocks per anchor, least recently used first, bounded per anchor and in total.

    `add` and the caps return the partial blocks they drop: nothing else can reach those,
    so the caller frees them from the hot tier. Whole blocks dropped here stay reachable
    through the chain hash and are only forgotten.
    """

    def __init__(self, max_per_anchor: int = 32, max_entries: int = 4096) -> None:
        if max_per_anchor < 1 or max_entries < 1:
            raise ValueError("caps must be >= 1")
        self.max_per_anchor = max_per_anchor
        self.max_entries = max_entries
        self._anchors: dict[str, OrderedDict[BlockKey, Child]] = {}
        self._lru: OrderedDict[BlockKey, Child] = OrderedDict()

    def __len__(self) -> int:
        return len(self._lru)

    def __contains__(self, key: object) -> bool:
        return key in self._lru

    def children(self, anchor: str) -> list[Child]:
        return list(self._anchors.get(anchor, {}).values())

    def covering(self, anchor: str, tokens: Sequence[int]) -> Child | None:
        """A child of `anchor` whose ids start with `tokens` (then storing them adds nothing)."""
        want = token_bytes(tokens)
        for child in self._anchors.get(anchor, {}).values():
            if child.tokens.startswith(want):
                return child
        return None

    def best(self, anchor: str, tokens: Sequence[int]) -> tuple[Child, int] | None:
        """The child of `anchor` sharing the most leading ids with `tokens`, and how many."""
        children = self._anchors.get(anchor)
        if not children or not tokens:
            return None
        want = token_bytes(tokens)
        found, most = None, 0
        for child in reversed(children.values()):  # most recent first: ties go to it
            n = common_prefix_tokens(child.tokens, want)
            if n > most:
                found, most = child, n
        return (found, most) if found is not None else None

    def add(self, anchor: str, key: BlockKey, tokens: Sequence[int], partial: bool) -> list[Child]:
        """Record (or refresh) a block after `anchor`; returns the partial blocks dropped.

        A partial block makes older partial siblings that are prefixes of it redundant.
        """
        dropped: list[Child] = []
        if key in self._lru:
            self.touch(key)
            return dropped
        child = Child(key, anchor, token_bytes(tokens), partial)
        for old in self.children(anchor):
            if old.partial and child.tokens.startswith(old.tokens):
                dropped.append(self._remove(old))
        siblings = self._anchors.setdefault(anchor, OrderedDict())
        siblings[key] = child
        self._lru[key] = child
        while len(siblings) > self.max_per_anchor:
            dropped.append(self._remove(next(iter(siblings.values()))))
        while len(self._lru) > self.max_entries:
            dropped.append(self._remove(next(iter(self._lru.values()))))
        return [c for c in dropped if c.partial]

    def touch(self, key: BlockKey) -> None:
        child = self._lru.get(key)
        if child is not None:
            self._lru.move_to_end(key)
            self._anchors[child.anchor].move_to_end(key)

    def discard(self, key: BlockKey) -> Child | None:
        child = self._lru.get(key)
        return self._remove(child) if child is not None else None

    def clear(self) -> None:
        self._anchors.clear()
        self._lru.clear()

    def _remove(self, child: Child) -> Child:
        del self._lru[child.key]
        siblings = self._anchors[child.anchor]
        del siblings[child.key]
        if not siblings:
            del self._anchors[child.anchor]
        return child
