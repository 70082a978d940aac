"""A KV cache whose length lives on the device, so DFlash can queue a cycle before it
reads the previous one back.

In the pipelined loop (loop.py) the host still waits for every verify before it builds
the next one: rolling back the target's cache (`KVCache.trim`) needs the number of
accepted drafts as a Python int. On a small target, where building a pass's graph on the
host takes about as long as the GPU takes to run it, that wait puts the two end to end:
a cycle costs the host's verify plus the device's.

Here the offset is a device scalar. A block's keys and values are written at it
(`slice_update`), the queries are rotated from it (MLX's RoPE takes an array offset),
the mask hides every key past each query's position, and `commit(num_valid)` moves the
offset to just after the block's accepted rows: a rollback with no host read. The
buffers are preallocated and the keys handed to attention are a bucketed width past an
upper bound of the offset that the host keeps (`bound`), so shapes repeat.
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx

BUCKET_TOKENS = 256  # the keys attention sees: a multiple of this past `bound`
GROWTH_TOKENS = 1024  # the buffers grow by at least this much at a time


def _bucket(n: int) -> int:
    return -(-n // BUCKET_TOKENS) * BUCKET_TOKENS


class DeviceOffsetKVCache:
    """One layer's keys and values, with a device-side length (int32 scalar).

    `update_and_fetch` appends a block at the offset provisionally (the offset moves past
    all of it); `commit(num_valid)` keeps only the block's first `num_valid` rows. The
    host's `bound` is never below the offset.
    """

    def __init__(self, keys: mx.array | None = None, values: mx.array | None = None) -> None:
        """Start from a prefix's keys and values [B, H, S, D] (all valid), or empty."""
        self.keys: mx.array | None = None
        self.values: mx.array | None = None
        self.bound = 0
        self.offset = mx.array(0, dtype=mx.int32)
        self._start = self.offset
        if keys is not None and values is not None:
            n = keys.shape[2]
            self._reserve(keys, values, n)
            assert self.keys is not None and self.values is not None
            self.keys[..., :n, :] = keys
            self.values[..., :n, :] = values
            self.bound = n
            self.offset = mx.array(n, dtype=mx.int32)
            self._start = self.offset

    @classmethod
    def from_cache(cls, cache: Any) -> DeviceOffsetKVCache:
        """A copy of a host-offset KVCache's valid prefix."""
        if cache.keys is None or cache.offset == 0:
            return cls()
        n = cache.offset
        return cls(cache.keys[..., :n, :], cache.values[..., :n, :])

    def _reserve(self, keys: mx.array, values: mx.array, length: int) -> None:
        """Buffers holding at least `length` positions, the old contents kept."""
        if self.keys is not None and self.keys.shape[2] >= length:
            return
        old = 0 if self.keys is None else self.keys.shape[2]
        size = max(_bucket(length), old + GROWTH_TOKENS)
        b, h, _, dk = keys.shape
        new_keys = mx.zeros((b, h, size, dk), keys.dtype)
        new_values = mx.zeros((b, h, size, values.shape[3]), values.dtype)
        if self.keys is not None and self.values is not None and old:
            new_keys[..., :old, :] = self.keys
            new_values[..., :old, :] = self.values
        self.keys, self.values = new_keys, new_values

    def width(self, n: int) -> int:
        """How many keys attention sees for a block of `n` rows appended now."""
        return _bucket(self.bound + n)

    def make_mask(self, n: int, *, return_array: bool = False, window_size: Any = None) -> Any:
        """[n, width]: query i sees the keys up to its own position, offset + i."""
        if window_size is not None:
            raise NotImplementedError("sliding windows are not supported here")
        positions = self.offset + mx.arange(n, dtype=mx.int32)[:, None]
        return mx.arange(self.width(n), dtype=mx.int32)[None] <= positions

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        n = keys.shape[2]
        width = self.width(n)
        self._reserve(keys, values, width)
        assert self.keys is not None and self.values is not None
        start = mx.concatenate(
            [mx.zeros((2,), mx.int32), self.offset.reshape(1), mx.zeros((1,), mx.int32)]
        )
        self.keys = mx.slice_update(self.keys, keys, start, axes=(0, 1, 2, 3))
        self.values = mx.slice_update(self.values, values, start, axes=(0, 1, 2, 3))
        self._start = self.offset
        self.offset = self.offset + n
        self.bound += n
        return self.keys[..., :width, :], self.values[..., :width, :]

    def commit(self, num_valid: mx.array | int) -> None:
        """Keep the first `num_valid` rows of the last block (a device scalar)."""
        self.offset = self._start + num_valid

    def settle(self, bound: int) -> None:
        """A tighter upper bound of the offset, from what the host has read back since
        (the exact length then, plus the rows appended after it)."""
        self.bound = min(self.bound, bound)

    @property
    def state(self) -> list[mx.array]:
        return [a for a in (self.keys, self.values, self.offset) if a is not None]

    def to_cache(self, length: int) -> Any:
        """A host-offset KVCache of the first `length` positions (the caller read it)."""
        from omlx.mlx_lm_compat import KVCache

        cache = KVCache()
        if length and self.keys is not None and self.values is not None:
            cache.update_and_fetch(self.keys[..., :length, :], self.values[..., :length, :])
        return cache
