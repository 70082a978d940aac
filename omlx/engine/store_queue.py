"""Finished sequences waiting to be stored in the prefix cache, and when they go.

Plain Python: the loop hands each finished sequence over, and `flush` stores, holds or
drops them by policy (cache.store_while_busy); the stores themselves go through the
prefix hooks, on the engine thread.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from omlx.engine.api import FinishReason
from omlx.engine.live import Finished
from omlx.engine.prefix import PrefixHooks

log = logging.getLogger(__name__)

# Finished sequences held back while others decode (cache.store_while_busy off); past
# this many, or this much KV (held in device memory meanwhile), the oldest are dropped.
MAX_DEFERRED_STORES = 16
MAX_DEFERRED_STORE_BYTES = 1 << 30


@dataclass(slots=True)
class StoreQueue:
    pending: list[Finished] = field(default_factory=list)
    dropped: int = 0  # finished sequences never stored (deferred past the cap)

    def add(self, fin: Finished) -> None:
        if fin.cache is not None and fin.tokens:
            self.pending.append(fin)

    def flush(self, prefix: PrefixHooks, *, busy: bool, idle_store: bool = True) -> None:
        """Store what policy allows now; `busy`: other requests run or wait."""
        if not prefix.defer_stores:
            while self.pending:
                _store(prefix, self.pending.pop())
            return
        # Deferred (cache.store_while_busy off): a store's copy out of device memory would
        # stall every decoding stream, so it waits for an idle engine. A cancelled
        # request's KV is stored at once: its retry usually arrives with the cancel.
        for fin in [f for f in self.pending if f.reason == FinishReason.CANCELLED]:
            self.pending.remove(fin)
            _store(prefix, fin)
        if busy:
            held = sum(_cache_bytes(f.cache) for f in self.pending)
            while self.pending and (
                len(self.pending) > MAX_DEFERRED_STORES or held > MAX_DEFERRED_STORE_BYTES
            ):
                oldest = self.pending.pop(0)
                held -= _cache_bytes(oldest.cache)
                self.dropped += 1
                log.debug("prefix cache: %s not stored (engine busy)", oldest.live.request_id)
            return
        if idle_store and self.pending:  # one per tick: an arrival waits for one at most
            _store(prefix, self.pending.pop())

    def drain(self, prefix: PrefixHooks) -> None:
        """Store everything held (at teardown: kept for the next start in the cold tier)."""
        while self.pending:
            _store(prefix, self.pending.pop())


def _store(prefix: PrefixHooks, fin: Finished) -> None:
    try:
        prefix.store(fin.tokens or [], fin.cache or [])
    except Exception:
        log.exception("prefix cache store failed for %s", fin.live.request_id)


def _cache_bytes(cache: list[Any] | None) -> int:
    """Bytes a finished sequence's per-layer caches hold (0 where a cache cannot say)."""
    total = 0
    for c in cache or ():
        try:
            total += int(c.nbytes)
        except (AttributeError, NotImplementedError, TypeError):
            continue
    return total


__all__ = ["MAX_DEFERRED_STORES", "MAX_DEFERRED_STORE_BYTES", "StoreQueue"]
