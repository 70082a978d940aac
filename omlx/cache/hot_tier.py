"""RAM hot tier: an LRU of blocks under one byte budget shared by all models (pure Python)."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from omlx.cache.chain_hash import BlockKey
from omlx.cache.index import BlockInfo


@dataclass(slots=True)
class HotBlock:
    """A block in RAM: its info and its arrays (name -> numpy array; opaque here)."""

    info: BlockInfo
    arrays: dict[str, Any] = field(default_factory=dict)
    meta: dict[str, str] = field(default_factory=dict)
    last_used: float = 0.0  # unix time, for reports only (the order lives in HotTier)

    @property
    def key(self) -> BlockKey:
        return self.info.key

    @property
    def nbytes(self) -> int:
        return self.info.nbytes


EvictCallback = Callable[[HotBlock], None]


class HotTier:
    """LRU over blocks; `insert` evicts least-recently-used blocks until the budget holds.

    Evicted blocks go to `on_evict` (the cold-tier writer). Not thread-safe on its own:
    the owner holds one lock around every call. The callback must not block.
    """

    def __init__(self, budget_bytes: int, on_evict: EvictCallback | None = None) -> None:
        if budget_bytes < 0:
            raise ValueError("budget_bytes must be >= 0")
        self.budget_bytes = budget_bytes
        self.on_evict = on_evict
        self._blocks: OrderedDict[BlockKey, HotBlock] = OrderedDict()  # oldest first
        self.num_bytes = 0

    def __contains__(self, key: object) -> bool:
        return key in self._blocks

    def __len__(self) -> int:
        return len(self._blocks)

    def keys(self) -> list[BlockKey]:
        """Keys from least to most recently used (the eviction order)."""
        return list(self._blocks)

    def blocks(self) -> Iterator[HotBlock]:
        return iter(self._blocks.values())

    def peek(self, key: BlockKey) -> HotBlock | None:
        """The block, without changing the LRU order."""
        return self._blocks.get(key)

    def get(self, key: BlockKey) -> HotBlock | None:
        """The block, marked most recently used."""
        block = self._blocks.get(key)
        if block is not None:
            self._blocks.move_to_end(key)
            block.last_used = time.time()
        return block

    def insert(self, block: HotBlock) -> list[BlockKey]:
        """Add (or replace) a block as most recently used; returns the keys evicted.

        A block larger than the whole budget is handed straight to `on_evict`.
        """
        old = self._blocks.pop(block.key, None)
        if old is not None:
            self.num_bytes -= old.nbytes
        if block.nbytes > self.budget_bytes:
            self._evicted(block)
            return [block.key]
        self._blocks[block.key] = block
        block.last_used = time.time()
        self.num_bytes += block.nbytes
        return self._evict_to(self.budget_bytes)

    def remove(self, key: BlockKey) -> HotBlock | None:
        """Drop a block without handing it to `on_evict`."""
        block = self._blocks.pop(key, None)
        if block is not None:
            self.num_bytes -= block.nbytes
        return block

    def clear(self, model_fingerprint: str | None = None) -> int:
        """Drop every block (of one model when given), without eviction; returns the count."""
        keys = [
            k
            for k, b in self._blocks.items()
            if model_fingerprint is None or b.info.model_fingerprint == model_fingerprint
        ]
        for k in keys:
            self.remove(k)
        return len(keys)

    def _evict_to(self, budget_bytes: int) -> list[BlockKey]:
        evicted: list[BlockKey] = []
        while self.num_bytes > budget_bytes and self._blocks:
            _, block = self._blocks.popitem(last=False)
            self.num_bytes -= block.nbytes
            self._evicted(block)
            evicted.append(block.key)
        return evicted

    def _evicted(self, block: HotBlock) -> None:
        if self.on_evict is not None:
            self.on_evict(block)
