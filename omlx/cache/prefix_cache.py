"""The cache the engine calls: one hot budget and one cold directory shared by all models.

`PrefixCache` owns the tiers and the cold writer; `for_model` hands each engine its
`ModelPrefixCache` (model_cache.py, the MLX side; the engine sees it as `PrefixHooks`).
Pure Python here: `omlx cache` and the server can build reports without MLX.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from omlx.cache.chain_hash import BlockKey
from omlx.cache.cold_format import BadBlockFile
from omlx.cache.cold_index import ColdEntry, ColdIndex, default_cap_bytes
from omlx.cache.cold_store import ColdWriter, read_block
from omlx.cache.hot_tier import HotBlock, HotTier
from omlx.cache.index import BlockInfo
from omlx.schemas.cache import CacheReport, ModelCacheReport, TierUsage
from omlx.schemas.stats import CacheStats, CacheTierStats
from omlx.settings import CacheSettings, omlx_home

if TYPE_CHECKING:
    import numpy as np

    from omlx.cache.model_cache import ModelPrefixCache

log = logging.getLogger(__name__)

Tier = Literal["hot", "cold", "all"]


def default_cold_dir(settings: CacheSettings) -> Path:
    return Path(settings.cold_dir).expanduser() if settings.cold_dir else omlx_home() / "cache"


@dataclass(slots=True)
class ModelCounters:
    name: str = ""
    hits: int = 0
    misses: int = 0
    hit_tokens: int = 0
    cold_hit_tokens: int = 0  # of hit_tokens, those read back from the cold tier


class PrefixCache:
    """Tiered block store shared by every model; thread-safe (one lock, never held over I/O)."""

    def __init__(
        self,
        settings: CacheSettings,
        cold_dir: Path | None = None,
        *,
        cold_cap_bytes: int | None = None,
    ) -> None:
        self.settings = settings
        self.enabled = settings.enabled
        self.block_size = settings.block_size
        self.cold_dir = Path(cold_dir) if cold_dir is not None else default_cold_dir(settings)
        cap = cold_cap_bytes if cold_cap_bytes is not None else settings.cold_cap_bytes
        self._lock = threading.Lock()
        self.hot = HotTier(settings.hot_budget_bytes if self.enabled else 0, self._on_hot_evict)
        self.cold = ColdIndex(
            self.cold_dir, cap or default_cap_bytes(self.cold_dir), self.block_size
        )
        self._pending: dict[BlockKey, HotBlock] = {}  # left the hot tier, not on disk yet
        self._counters: dict[str, ModelCounters] = {}
        self._models: dict[str, ModelPrefixCache] = {}
        self.writer: ColdWriter | None = None
        if self.enabled:
            self.cold_dir.mkdir(parents=True, exist_ok=True)
            report, evicted = self.cold.rebuild()
            self._delete(evicted)
            log.info(
                "cache rebuilt from %s: %d blocks, %d bytes, %d skipped",
                self.cold_dir, report.num_blocks, report.num_bytes, report.num_skipped,
            )  # fmt: skip
            self.writer = ColdWriter(self.cold_dir, self.block_size, self._on_written)

    # -- the engine side ---------------------------------------------------------------

    def for_model(
        self, model_fingerprint: str, model: Any, model_name: str = ""
    ) -> ModelPrefixCache:
        """The per-model view an engine calls on its own thread (cached per fingerprint)."""
        from omlx.cache.model_cache import ModelPrefixCache

        with self._lock:
            view = self._models.get(model_fingerprint)
            counters = self._counters.setdefault(model_fingerprint, ModelCounters())
            counters.name = model_name or counters.name
        if view is None or view.model is not model:
            view = ModelPrefixCache(self, model_fingerprint, model, model_name)
            with self._lock:
                self._models[model_fingerprint] = view
        return view

    def factory(self) -> Callable[[Any, Path], ModelPrefixCache]:
        """`(model, model_dir) -> ModelPrefixCache` for LocalModelPool(prefix_factory=...)."""
        from omlx.cache.model_cache import prefix_factory

        return prefix_factory(self)

    def lookup(self, key: BlockKey) -> BlockInfo | None:
        """What any tier knows of `key`, without touching LRU order."""
        with self._lock:
            block = self.hot.peek(key) or self._pending.get(key)
            if block is not None:
                return block.info
            entry = self.cold.peek(key)
            return entry.info if entry is not None else None

    def load(self, info: BlockInfo) -> HotBlock | None:
        """The block's arrays from RAM, else from disk (then promoted to the hot tier).

        None when it vanished meanwhile or its file is bad (counted, deleted).
        """
        with self._lock:
            block = self.hot.get(info.key) or self._pending.get(info.key)
            entry = self.cold.touch(info.key, time.time()) if block is None else None
        if block is not None:
            return block
        if entry is None:
            return None
        with self._lock:
            c = self._counters.setdefault(info.model_fingerprint, ModelCounters())
            c.cold_hit_tokens += info.num_tokens
        _persist_access([entry], entry.atime)
        try:
            header, arrays = read_block(entry.path)
        except BadBlockFile as e:
            self.discard_bad(entry.info.key, f"{entry.path}: {e}")
            return None
        block = HotBlock(info=_ram_info(header.info, arrays), arrays=arrays, meta=header.meta)
        self.insert([block])
        return block

    def insert(self, blocks: Iterable[HotBlock]) -> None:
        """Put blocks in RAM, each as most recently used; evictions go to the cold writer."""
        with self._lock:
            for block in blocks:
                self.hot.insert(block)

    def touch(self, keys: Iterable[BlockKey]) -> None:
        now = time.time()
        touched = []
        with self._lock:
            for key in keys:
                if self.hot.get(key) is None:
                    touched.append(self.cold.touch(key, now))
        _persist_access([e for e in touched if e is not None], now)

    def drop(self, keys: Iterable[BlockKey]) -> None:
        """Forget RAM blocks outright (partial blocks nothing can reach any more)."""
        with self._lock:
            for key in keys:
                self.hot.remove(key)

    def discard_bad(self, key: BlockKey, reason: str) -> None:
        """Forget a block whose file turned out bad; count it, delete the file."""
        log.warning("cold cache: skipping %s", reason)
        with self._lock:
            entry = self.cold.remove(key)
            self.cold.num_skipped += 1
        if entry is not None:
            self._delete([entry])

    def count(self, model_fingerprint: str, hit_tokens: int) -> None:
        with self._lock:
            c = self._counters.setdefault(model_fingerprint, ModelCounters())
            if hit_tokens:
                c.hits += 1
                c.hit_tokens += hit_tokens
            else:
                c.misses += 1

    # -- tiers -------------------------------------------------------------------------

    def _on_hot_evict(self, block: HotBlock) -> None:
        # Called under the lock by HotTier: only queue work here.
        if block.info.partial:  # RAM only: its index lives in the engine, not on disk
            return
        entry = self.cold.peek(block.key)
        if entry is not None and _covers(entry.info, block.info):
            return
        if self.writer is not None:
            self._pending[block.key] = block
            self.writer.submit(block)

    def _on_written(self, entry: ColdEntry) -> None:
        with self._lock:
            self._pending.pop(entry.info.key, None)
            evicted = self.cold.add(entry)
        self._delete(evicted)

    def _delete(self, entries: Iterable[ColdEntry]) -> None:
        for e in entries:
            e.path.unlink(missing_ok=True)

    def flush(self, timeout_s: float | None = None) -> bool:
        """Wait for queued cold writes (tests, shutdown)."""
        return self.writer.flush(timeout_s) if self.writer is not None else True

    def spill(self) -> None:
        """Hand every hot block to the cold tier and wait (shutdown: keep RAM blocks)."""
        with self._lock:
            for block in list(self.hot.blocks()):
                self.hot.remove(block.key)
                self._on_hot_evict(block)
        self.flush()

    def close(self, spill: bool = True) -> None:
        if spill and self.enabled:
            self.spill()
        if self.writer is not None:
            self.writer.close()
            self.writer = None

    def clear(self, model_fingerprint: str | None = None, tier: Tier = "all") -> int:
        """Drop blocks (of one model when given) from a tier; returns how many."""
        self.flush()
        num = 0
        with self._lock:
            if tier in ("hot", "all"):
                num += self.hot.clear(model_fingerprint)
            gone = self.cold.remove_model(model_fingerprint) if tier in ("cold", "all") else []
        self._delete(gone)
        return num + len(gone)

    # -- reports -----------------------------------------------------------------------

    def stats(self) -> CacheStats:
        with self._lock:
            hot = [b.info for b in self.hot.blocks()]
            cold = [e.info for e in self.cold.entries()]
            counters = list(self._counters.values())
            skipped = self.cold.num_skipped
        return CacheStats(
            enabled=self.enabled,
            hits=sum(c.hits for c in counters),
            misses=sum(c.misses for c in counters),
            hit_tokens=sum(c.hit_tokens for c in counters),
            cold_hit_tokens=sum(c.cold_hit_tokens for c in counters),
            hot=_tier_stats(hot),
            cold=_tier_stats(cold),
            skipped_files=skipped,
        )

    def report(self) -> CacheReport:
        """Per-model blocks, tokens and bytes per tier with hit rates (`omlx cache inspect`)."""
        with self._lock:
            hot = [(b.info, b.last_used) for b in self.hot.blocks()]
            cold = [(e.info, e.atime) for e in self.cold.entries()]
            counters = {k: replace(c) for k, c in self._counters.items()}
            skipped = self.cold.num_skipped
        report = build_report(hot, cold, counters, source="server")
        report.enabled = self.enabled
        report.cold_dir = str(self.cold_dir)
        report.block_size = self.block_size
        report.hot_budget_bytes = self.hot.budget_bytes
        report.cold_cap_bytes = self.cold.cap_bytes
        report.skipped_files = skipped
        return report


def _persist_access(entries: list[ColdEntry], now: float) -> None:
    # The file's mtime is the cold tier's LRU clock across restarts (cold_index.ColdEntry).
    for e in entries:
        with contextlib.suppress(OSError):
            os.utime(e.path, (now, now))


def _covers(stored: BlockInfo, new: BlockInfo) -> bool:
    return (stored.has_window or not new.has_window) and (stored.has_state or not new.has_state)


def _ram_info(info: BlockInfo, arrays: dict[str, np.ndarray]) -> BlockInfo:
    return replace(info, nbytes=sum(a.nbytes for a in arrays.values()))


def _tier_stats(infos: list[BlockInfo]) -> CacheTierStats:
    return CacheTierStats(
        blocks=len(infos),
        tokens=sum(i.num_tokens for i in infos),
        bytes=sum(i.nbytes for i in infos),
    )


def build_report(
    hot: list[tuple[BlockInfo, float | None]],
    cold: list[tuple[BlockInfo, float | None]],
    counters: dict[str, ModelCounters],
    *,
    source: Literal["server", "disk"],
) -> CacheReport:
    """Group blocks by model fingerprint into a CacheReport (header fields left default)."""
    models: dict[str, ModelCacheReport] = {}

    def model(fp: str, name: str) -> ModelCacheReport:
        if fp not in models:
            models[fp] = ModelCacheReport(model=name or fp[:12], fingerprint=fp)
        elif name and models[fp].model == fp[:12]:
            models[fp].model = name
        return models[fp]

    for tier, items in (("hot", hot), ("cold", cold)):
        for info, when in items:
            usage: TierUsage = getattr(model(info.model_fingerprint, info.model_name), tier)
            usage.blocks += 1
            usage.tokens += info.num_tokens
            usage.bytes += info.nbytes
            if when is not None:
                usage.oldest = when if usage.oldest is None else min(usage.oldest, when)
                usage.newest = when if usage.newest is None else max(usage.newest, when)
    for fp, c in counters.items():
        m = model(fp, c.name)
        m.hits, m.misses, m.hit_tokens = c.hits, c.misses, c.hit_tokens
        m.cold_hit_tokens = c.cold_hit_tokens
        looked = c.hits + c.misses
        m.hit_rate = c.hits / looked if looked else None
    return CacheReport(
        enabled=True, source=source, cold_dir="", block_size=0,
        models=sorted(models.values(), key=lambda m: m.model),
    )  # fmt: skip


def scan_report(settings: CacheSettings, cold_dir: Path | None = None) -> CacheReport:
    """A CacheReport read from the cold directory alone (no server, nothing evicted)."""
    root = Path(cold_dir) if cold_dir is not None else default_cold_dir(settings)
    index = ColdIndex(root, cap_bytes=1 << 62, block_size=settings.block_size)
    index.rebuild()
    cold = [(e.info, e.atime) for e in index.entries()]
    report = build_report([], cold, {}, source="disk")
    report.enabled = settings.enabled
    report.cold_dir = str(root)
    report.block_size = settings.block_size
    report.hot_budget_bytes = settings.hot_budget_bytes
    report.cold_cap_bytes = settings.cold_cap_bytes or default_cap_bytes(root)
    report.skipped_files = index.num_skipped
    return report


def clear_cold_dir(
    settings: CacheSettings, model: str | None = None, cold_dir: Path | None = None
) -> int:
    """Delete cold block files (of the model whose name or fingerprint prefix is `model`)."""
    root = Path(cold_dir) if cold_dir is not None else default_cold_dir(settings)
    index = ColdIndex(root, cap_bytes=1 << 62, block_size=settings.block_size)
    index.rebuild()
    gone = [e for e in index.entries() if model is None or matches_model(e.info, model)]
    for e in gone:
        e.path.unlink(missing_ok=True)
    return len(gone)


def matches_model(info: BlockInfo, model: str) -> bool:
    return info.model_name == model or (
        len(model) >= 6 and info.model_fingerprint.startswith(model)
    )
