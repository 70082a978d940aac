"""A batch KV cache whose rows live in slots, so rows leave and join without a copy.

mlx-lm's BatchKVCache keeps exactly one row per running sequence: when a sequence ends,
`filter` gathers every kept row into new arrays, and when sequences join, `extend` pads
and concatenates both caches; each is a copy of the whole cache, and under staggered
traffic one happens every few steps. On a 2-core CPU with SmolLM2 at 64 rows they took
15 s of an 89 s run (benchmarks/results/staggered_decode_cpu.md).

Here the arrays keep spare rows (capacity, doubled when joins need more, never past the
generator's batch size). A row that leaves is overwritten by one of the last rows
(swap-remove; the batch reorders its per-row lists to match, see `swap_remove_order`),
and joining rows are written into the free slots at the positions that right-align them
with the batch. Both are slice updates MLX does in place (on a CPU; see
`waits_for_in_place`), so they cost the rows moved, not the cache. The live rows are
always the first `len(offset)`; the slots past them hold stale values nothing reads.

A full copy still happens when the arrays must grow, when a joining prompt is longer
than the batch's history (the batch's rows must then move right, as in mlx-lm), when
all rows share left padding of a quarter of the history or more (dropped then; mlx-lm
drops any at once), when fewer than a quarter of the slots are live (memory goes back),
and when one row is left (it loses its padding: batch_join decodes a lone row without
a mask).
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx
from mlx_lm.models.cache import BatchKVCache, KVCache


def waits_for_in_place() -> bool:
    """Whether to wait for the arrays' readers so MLX can write in place.

    An update is in place only when nothing else references the arrays, so the moved
    rows are evaluated first, the step in flight is awaited before a leave, and a
    finished row's cache is evaluated when extracted. On a CPU the device is the host's
    own cores and waiting costs nothing; on a GPU each wait would stall the pipelined
    decode, so there nothing waits and MLX copies when it must, as mlx-lm always does.
    """
    return mx.default_device().type == mx.cpu


def swap_remove_order(keep: list[int]) -> list[int]:
    """`keep` (kept row indices) reordered so that row i stays at i wherever it can and
    each freed slot below len(keep) takes one of the kept rows past it.

    Applying this order moves only len(freed slots) rows; the set of rows is `keep`'s.
    """
    kept = sorted(keep)
    n = len(kept)
    if kept == list(range(n)):
        return kept
    keep_set = set(kept)
    tail = [j for j in kept if j >= n]
    order, movers = [], iter(tail)
    for i in range(n):
        order.append(i if i in keep_set else next(movers))
    return order


class LeftRowKVCache(KVCache):
    """A row that left the batch, as a KVCache whose arrays are cut from a gather of all
    the rows that left with it only when first read.

    Rows leave when their sequences finish; on a GPU their caches are stored in the
    prefix cache later, when the engine is idle. Cutting each row's keys and values out
    at once cost four graph nodes a row and layer in the leaving step, ~1-2 ms of host
    time a row (an H100 trace: 28-120 ms when 57-64 rows of the 36-layer 8B shape left
    at once); a slice and a gather of each array a layer serve all of them.
    """

    def __init__(self, source: tuple[mx.array, mx.array], row: int, start: int, end: int):
        self._keys: mx.array | None = None
        self._values: mx.array | None = None
        super().__init__()
        self._source: tuple[mx.array, mx.array] | None = source
        self._row, self._start = row, start
        self.offset = end - start

    def _cut(self) -> None:
        keys, values = self._source  # type: ignore[misc]
        r, s, n = self._row, self._start, self.offset
        self._keys = mx.contiguous(keys[r : r + 1, :, s : s + n])
        self._values = mx.contiguous(values[r : r + 1, :, s : s + n])
        self._source = None  # the gather is freed once every row is cut or dropped

    @property
    def keys(self) -> mx.array | None:
        if self._source is not None:
            self._cut()
        return self._keys

    @keys.setter
    def keys(self, value: mx.array | None) -> None:
        self._keys = value

    @property
    def values(self) -> mx.array | None:
        if self._source is not None:
            self._cut()
        return self._values

    @values.setter
    def values(self, value: mx.array | None) -> None:
        self._values = value


class SlotKVCache(BatchKVCache):
    """BatchKVCache with spare rows; see the module docstring."""

    max_rows = 0  # the most rows the batch will hold (0: unknown); slots grow up to it

    @classmethod
    def adopt(cls, cache: Any, max_rows: int = 0) -> Any:
        """Turn a plain BatchKVCache into a slot cache in place (same arrays and state)."""
        if type(cache) is BatchKVCache:
            cache.__class__ = cls
        if isinstance(cache, cls) and max_rows:
            cache.max_rows = max_rows
        return cache

    @property
    def rows(self) -> int:
        return int(self.offset.shape[0])

    @property
    def capacity(self) -> int:
        return self.rows if self.keys is None else int(self.keys.shape[0])

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        n, length = keys.shape[0], keys.shape[2]
        prev = self._idx
        if self.keys is None or prev + length > self.keys.shape[2]:
            self._grow_positions(keys, values, length)
        self.offset = self.offset + length
        self._idx += length
        if n == self.keys.shape[0]:
            self.keys[..., prev : self._idx, :] = keys
            self.values[..., prev : self._idx, :] = values
        else:
            self.keys[:n, :, prev : self._idx, :] = keys
            self.values[:n, :, prev : self._idx, :] = values
        return self.keys_and_values()

    def _grow_positions(self, keys: mx.array, values: mx.array, length: int) -> None:
        rows = self.capacity if self.keys is not None else keys.shape[0]
        _, heads, _, k_dim = keys.shape
        v_dim = values.shape[3]
        steps = (self.step + length - 1) // self.step
        new_k = mx.zeros((rows, heads, steps * self.step, k_dim), keys.dtype)
        new_v = mx.zeros((rows, heads, steps * self.step, v_dim), values.dtype)
        if self.keys is None:
            self.keys, self.values = new_k, new_v
            return
        old_k, old_v = self.keys, self.values
        if self._idx % self.step != 0:
            old_k, old_v = old_k[..., : self._idx, :], old_v[..., : self._idx, :]
        self.keys = mx.concatenate([old_k, new_k], axis=2)
        self.values = mx.concatenate([old_v, new_v], axis=2)

    def keys_and_values(self) -> tuple[mx.array, mx.array]:
        n = self.rows
        if self.keys.shape[0] == n:
            return self.keys[..., : self._idx, :], self.values[..., : self._idx, :]
        return self.keys[:n, :, : self._idx, :], self.values[:n, :, : self._idx, :]

    def filter(self, batch_indices: list[int]) -> None:
        known = self.__dict__.pop("known_padding", None)  # see the padding read below
        keep = [int(i) for i in batch_indices]
        n = len(keep)
        moves = [(i, j) for i, j in enumerate(keep) if i != j]
        in_place = self.keys is not None and all(j >= n for _, j in moves)
        if self.keys is not None and not in_place:
            self._gather_rows(keep)
        elif moves:
            # The moved rows get buffers of their own first (see waits_for_in_place).
            src = mx.array([j for _, j in moves])
            rows_k, rows_v = self.keys[src], self.values[src]
            if waits_for_in_place():
                mx.eval(rows_k, rows_v)
            if len(moves) == 1:
                ((i, _),) = moves
                self.keys[i : i + 1], self.values[i : i + 1] = rows_k, rows_v
            else:  # one scatter: where MLX must copy, it copies once, not once a row
                dst = mx.array([i for i, _ in moves])
                self.keys[dst], self.values[dst] = rows_k, rows_v
        index = mx.array(keep, dtype=mx.int32)
        self.offset = self.offset[index]
        self.left_padding = self.left_padding[index]
        if self.keys is None or not keep:
            return
        if (4 * n < self.capacity and self.capacity - n >= 8) or (n == 1 < self.capacity):
            self._gather_rows(list(range(n)))  # most slots idle: give the memory back
        # Read back, the new padding would wait for the step in flight (it is queued
        # behind it on the stream); where the leaving rows' extraction read it, use that.
        dead = min(known[i] for i in keep) if known is not None else min(self.left_padding.tolist())
        # A lone row must start at position 0: batch_join decodes it without a mask.
        if dead > 0 and (4 * dead >= self._idx or n == 1):
            self._shift_left(dead)

    def extract(self, idx: int) -> Any:
        return self.extract_row(idx, int(self.left_padding[idx].item()))

    def extract_row(self, idx: int, padding: int) -> Any:
        """Row `idx` as a KVCache, its left padding read by the caller: mlx-lm's extract
        reads the whole padding array back from the device for every (row, layer), 2,304
        reads when 64 rows of a 36-layer model leave at once; a batch reads it once a
        layer (`PrimedGenerationBatch.extract_cache`).

        Evaluated now where that is free: a lazy slice would keep the arrays referenced
        (a finished row's cache may never be read), and MLX then copies them whole at the
        next write."""
        cache = KVCache()
        cache.keys = mx.contiguous(self.keys[idx : idx + 1, :, padding : self._idx])
        cache.values = mx.contiguous(self.values[idx : idx + 1, :, padding : self._idx])
        cache.offset = cache.keys.shape[2]
        if waits_for_in_place():
            mx.eval(cache.keys, cache.values)
        return cache

    def extract_rows(self, rows: list[int], padding: list[int]) -> list[KVCache]:
        """Rows `rows` (their left padding `padding`, read by the caller) as KVCaches,
        from one gather of their used positions; each row is cut out when first read
        (LeftRowKVCache)."""
        start = min(padding[r] for r in rows)
        index = mx.array(rows, dtype=mx.int32)
        keys = self.keys[:, :, start : self._idx][index]
        values = self.values[:, :, start : self._idx][index]
        if waits_for_in_place():  # read now, so the filter that follows writes in place
            mx.eval(keys, values)
        else:
            # Queued now: until the gather runs it holds the whole batch cache of this
            # step, and a finished row may wait long for its store (an idle engine).
            mx.async_eval(keys, values)
        return [
            LeftRowKVCache((keys, values), j, padding[r] - start, self._idx - start)
            for j, r in enumerate(rows)
        ]

    def _gather_rows(self, rows: list[int]) -> None:
        index = mx.array(rows, dtype=mx.int32)
        self.keys, self.values = self.keys[index], self.values[index]

    def _shift_left(self, dead: int) -> None:
        self.keys = mx.contiguous(self.keys[..., dead:, :])
        self.values = mx.contiguous(self.values[..., dead:, :])
        self._idx -= dead
        self.left_padding = self.left_padding - dead

    def extend(self, other: Any) -> None:
        n, k = self.rows, int(other.offset.shape[0])
        if self.keys is None or other.keys is None or other._idx > self._idx:
            if self.keys is not None and self.capacity > n:
                self._gather_rows(list(range(n)))  # mlx-lm's extend reads every row
            super().extend(other)  # its copy: rows move right, or nothing is stored yet
            return
        if n + k > self.capacity:
            # Doubling keeps the copies few (each one is the whole cache); never past
            # the rows the batch can hold, so a full batch takes what mlx-lm's would.
            grown = max(n + k, 2 * self.capacity)
            self._add_slots(min(grown, self.max_rows) if self.max_rows >= n + k else grown)
        start = self._idx - other._idx
        other_k = other.keys[:k, :, : other._idx, :]
        other_v = other.values[:k, :, : other._idx, :]
        self.keys[n : n + k, :, start : self._idx, :] = other_k
        self.values[n : n + k, :, start : self._idx, :] = other_v
        self.offset = mx.concatenate([self.offset, other.offset])
        self.left_padding = mx.concatenate([self.left_padding, other.left_padding + start])

    def _add_slots(self, capacity: int) -> None:
        extra = capacity - self.capacity
        shape_k = (extra, *self.keys.shape[1:])
        shape_v = (extra, *self.values.shape[1:])
        self.keys = mx.concatenate([self.keys, mx.zeros(shape_k, self.keys.dtype)])
        self.values = mx.concatenate([self.values, mx.zeros(shape_v, self.values.dtype)])
