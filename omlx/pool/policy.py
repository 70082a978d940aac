"""Which models the pool keeps: memory budget, LRU order, pins and idle TTL (no MLX).

Pure bookkeeping: the pool asks `plan_load` which models to unload before a load and
`expired` which idle models outlived their TTL, then does the unloading itself.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from omlx.errors import ModelTooLarge, Overloaded
from omlx.platform.memory import system_memory_bytes

# The default budget: this fraction of physical RAM, leaving the rest to the OS and apps.
DEFAULT_BUDGET_FRACTION = 0.75

_UNITS = {
    "": 1,
    "B": 1,
    "K": 1000,
    "KB": 1000,
    "M": 1000**2,
    "MB": 1000**2,
    "G": 1000**3,
    "GB": 1000**3,
    "T": 1000**4,
    "TB": 1000**4,
    "KIB": 1024,
    "MIB": 1024**2,
    "GIB": 1024**3,
    "TIB": 1024**4,
}
_SIZE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([A-Za-z]*)\s*$")


def parse_memory_budget(text: str, total_bytes: int | None = None) -> int:
    """`"8GB"`, `"512MiB"`, `"1073741824"` -> bytes; `"0.75"` or `"75%"` -> that share of RAM.

    A bare number up to 1 is a fraction; a bare number above 1 is a byte count.
    """
    s = text.strip()
    if not s:
        s = str(DEFAULT_BUDGET_FRACTION)
    total = total_bytes if total_bytes is not None else system_memory_bytes()
    if s.endswith("%"):
        try:
            share = float(s[:-1]) / 100
        except ValueError:
            raise ValueError(f"bad memory budget {text!r}") from None
        return _fraction(share, total, text)
    match = _SIZE_RE.match(s)
    unit = match.group(2).upper() if match else ""
    if match is None or unit not in _UNITS:
        raise ValueError(f"bad memory budget {text!r}: use bytes like 8GB or a fraction like 0.75")
    value = float(match.group(1))
    if not unit and value <= 1:
        return _fraction(value, total, text)
    return int(value * _UNITS[unit])


def _fraction(share: float, total: int, text: str) -> int:
    if not 0 < share <= 1:
        raise ValueError(f"bad memory budget {text!r}: a fraction must be in (0, 1]")
    return int(total * share)


@dataclass(slots=True)
class PoolEntry:
    """One loaded (or loading) model as the policy sees it."""

    name: str
    size_bytes: int
    last_used_s: float
    in_flight: int = 0
    is_loading: bool = False
    ttl_s: float = 0.0  # 0 = never unloaded for idling
    estimated_bytes: int = 0  # from the weight files, before the load


class PoolPolicy:
    """Budget, LRU order, pins and TTL over named entries; the caller supplies the clock."""

    def __init__(
        self,
        budget_bytes: int,
        *,
        default_ttl_s: float = 0.0,
        pinned: Iterable[str] = (),
        ttl_overrides: dict[str, float] | None = None,
    ) -> None:
        self.budget_bytes = budget_bytes
        self.default_ttl_s = default_ttl_s
        self.pinned: set[str] = set(pinned)
        self.ttl_overrides = dict(ttl_overrides or {})
        self.entries: dict[str, PoolEntry] = {}

    # -- accounting ----------------------------------------------------------------------

    @property
    def used_bytes(self) -> int:
        return sum(e.size_bytes for e in self.entries.values())

    def ttl_of(self, name: str) -> float:
        return self.ttl_overrides.get(name, self.default_ttl_s)

    def add(self, name: str, size_bytes: int, now: float) -> PoolEntry:
        """Reserve `size_bytes` for a model about to load (plan_load said it fits)."""
        entry = PoolEntry(
            name,
            size_bytes,
            now,
            is_loading=True,
            ttl_s=self.ttl_of(name),
            estimated_bytes=size_bytes,
        )
        self.entries[name] = entry
        return entry

    def loaded(self, name: str, size_bytes: int | None, now: float) -> None:
        """The load finished; `size_bytes` is the measured size when known."""
        entry = self.entries[name]
        entry.is_loading = False
        entry.last_used_s = now
        if size_bytes:
            entry.size_bytes = size_bytes

    def remove(self, name: str) -> None:
        self.entries.pop(name, None)

    def begin(self, name: str, now: float) -> None:
        entry = self.entries.get(name)
        if entry is not None:
            entry.in_flight += 1
            entry.last_used_s = now

    def end(self, name: str, now: float) -> None:
        entry = self.entries.get(name)
        if entry is not None:
            entry.in_flight = max(0, entry.in_flight - 1)
            entry.last_used_s = now

    def pin(self, name: str) -> None:
        self.pinned.add(name)

    def unpin(self, name: str) -> None:
        self.pinned.discard(name)

    def set_ttl(self, name: str | None, ttl_s: float | None) -> None:
        """The default TTL (`name` None) or one model's; None drops a model's own TTL."""
        if name is None:
            self.default_ttl_s = ttl_s or 0.0
        elif ttl_s is None:
            self.ttl_overrides.pop(name, None)
        else:
            self.ttl_overrides[name] = ttl_s
        for entry in self.entries.values():  # loaded models take the new TTL at once
            entry.ttl_s = self.ttl_of(entry.name)

    # -- decisions -----------------------------------------------------------------------

    def is_evictable(self, entry: PoolEntry) -> bool:
        return entry.name not in self.pinned and entry.in_flight == 0 and not entry.is_loading

    def lru_order(self) -> list[str]:
        """Evictable models, least recently used first (ties by name, for stable tests)."""
        candidates = [e for e in self.entries.values() if self.is_evictable(e)]
        return [e.name for e in sorted(candidates, key=lambda e: (e.last_used_s, e.name))]

    def plan_load(self, name: str, size_bytes: int) -> list[str]:
        """The models to unload, in order, so that `size_bytes` more fit the budget.

        Raises ModelTooLarge when the model exceeds the whole budget (no retry helps) and
        Overloaded when pinned or busy models hold the room it needs (a retry may succeed).
        """
        if size_bytes > self.budget_bytes:
            raise ModelTooLarge(
                f"model {name!r} needs about {_gb(size_bytes)} but the memory budget is "
                f"{_gb(self.budget_bytes)} (settings models.memory_budget)",
                param="model",
            )
        free = self.budget_bytes - self.used_bytes
        victims: list[str] = []
        for victim in self.lru_order():
            if free >= size_bytes:
                break
            victims.append(victim)
            free += self.entries[victim].size_bytes
        if free < size_bytes:
            held = ", ".join(
                f"{e.name} {_gb(e.size_bytes)}" + (" pinned" if e.name in self.pinned else " busy")
                for e in self.entries.values()
                if not self.is_evictable(e)
            )
            raise Overloaded(
                f"model {name!r} needs about {_gb(size_bytes)}; the memory budget is "
                f"{_gb(self.budget_bytes)} and {held or 'other models'} cannot be unloaded now",
                retry_after_s=5,
            )
        return victims

    def expired(self, now: float) -> list[str]:
        """Idle, unpinned models whose TTL ran out, least recently used first."""
        return [
            name
            for name in self.lru_order()
            if (ttl := self.entries[name].ttl_s) > 0 and now - self.entries[name].last_used_s >= ttl
        ]

    def ttl_left_s(self, name: str, now: float) -> float | None:
        """Seconds until the TTL unloads `name`; None when it never will (no TTL, pinned)."""
        entry = self.entries.get(name)
        if entry is None or entry.ttl_s <= 0 or name in self.pinned:
            return None
        if entry.in_flight or entry.is_loading:
            return entry.ttl_s
        return max(0.0, entry.ttl_s - (now - entry.last_used_s))


def _gb(num_bytes: int) -> str:
    if num_bytes >= 1000**3:
        return f"{num_bytes / 1000**3:.2f} GB"
    return f"{num_bytes / 1000**2:.1f} MB"
