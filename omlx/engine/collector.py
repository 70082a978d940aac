"""Python's cyclic garbage collector and a serving engine.

A full (generation 2) collection walks every container object the process holds: after
a model, the tokenizer, the web framework and their modules are loaded that is ~100k
objects, ~50 ms on the 2-core CPU, and it holds the GIL throughout, so every engine
thread and the event loop stop with it. In a step trace of 64 streams on an H100 one
such pause took 238 ms in the middle of decoding (8 % of that load level). The objects
that make it slow are the long-lived ones loaded at start, so once a model is loaded
they are moved out of the collector's sight (`gc.freeze`): later collections walk only
what requests created since. Reference counting still frees frozen objects as usual;
only cycles among them wait, so an unload collects once and freezes again.
"""

from __future__ import annotations

import gc
import threading
import time
from typing import Any


def freeze_loaded() -> None:
    """After a load: collect what loading left behind, then freeze what survived."""
    gc.collect()
    gc.freeze()


def collect_unloaded() -> None:
    """After an unload: let the collector see everything once (an unloaded model's
    cycles are freed), then freeze what is still alive."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()


class CollectorPauses:
    """Sums the collector's pauses (any thread's) between two `take` calls."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._started: dict[int, float] = {}
        self._total = 0.0
        self._count = 0
        self._oldest = -1
        gc.callbacks.append(self._on_gc)

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        now = time.perf_counter()
        tid = threading.get_ident()
        if phase == "start":
            self._started[tid] = now
            return
        began = self._started.pop(tid, None)
        if began is None:
            return
        with self._lock:
            self._total += now - began
            self._count += 1
            self._oldest = max(self._oldest, int(info.get("generation", 0)))

    def take(self) -> tuple[float, int, int]:
        """(seconds paused, collections, oldest generation collected; -1 if none)."""
        with self._lock:
            taken = (self._total, self._count, self._oldest)
            self._total, self._count, self._oldest = 0.0, 0, -1
        return taken

    def close(self) -> None:
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)


__all__ = ["CollectorPauses", "collect_unloaded", "freeze_loaded"]
