"""KV caches whose length lives on the device, so DFlash can queue a cycle before it
reads the previous one back.

In the pipelined loop (loop.py) the host still waits for every verify before it builds
the next one: rolling back the target's cache (`KVCache.trim`) needs the number of
accepted drafts as a Python int. On a small target, where building a pass's graph on the
host takes about as long as the GPU takes to run it, that wait puts the two end to end:
a cycle costs the host's verify plus the device's.

Here the length is a device scalar that every layer of a model shares (`DeviceLength`).
A block's keys and values are written at it (`slice_update`), the queries are rotated
from it (MLX's RoPE takes an array offset), the mask hides every key past each query's
position, and `DeviceLength.commit(num_valid)` moves it past the block's accepted rows
once for all layers: a rollback with no host read. The buffers are preallocated, and the
keys handed to attention are a bucketed width past an upper bound of the length that
the host keeps (`bound`), so shapes repeat. On a host-bound step every graph node
counts, so a pass adds only its two writes a layer to what a plain cache costs.
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx

BUCKET_TOKENS = 256  # the keys attention sees: a multiple of this past `bound`
GROWTH_TOKENS = 1024  # the buffers grow by at least this much at a time


def _bucket(n: int) -> int:
    return -(-n // BUCKET_TOKENS) * BUCKET_TOKENS


class DeviceLength:
    """The committed length of a model's caches: a device int32 scalar, and the host's
    upper bound of it. A pass appends a block at the length in every layer; `commit`
    then keeps its first `num_valid` rows."""

    def __init__(self, length: int = 0) -> None:
        self.offset = mx.array(length, dtype=mx.int32)
        self.bound = length
        self._index: mx.array | None = None  # [0, 0, offset, 0]: where a pass writes

    def index(self) -> mx.array:
        if self._index is None:
            zeros = mx.zeros((2,), mx.int32)
            self._index = mx.concatenate([zeros, self.offset.reshape(1), zeros[:1]])
        return self._index

    def width(self, n: int) -> int:
        """How many keys attention sees for a block of `n` rows appended now."""
        return _bucket(self.bound + n)

    def place(self, offset: mx.array, bound: int) -> None:
        """Set the length outright: a device scalar (a compiled pass's input, or a pass
        repeated over the same context) and the host's bound of it."""
        self.offset, self.bound, self._index = offset, bound, None

    def commit(self, num_valid: mx.array | int, block: int) -> None:
        """After a pass of `block` rows: keep its first `num_valid` (device scalar)."""
        self.offset = self.offset + num_valid
        self.bound += block
        self._index = None

    def settle(self, bound: int) -> None:
        """A tighter upper bound of the length, from what the host has read back since
        (the exact length then, plus the rows appended after it)."""
        self.bound = min(self.bound, bound)


class DeviceOffsetKVCache:
    """One layer's keys and values in buffers, its length the shared `DeviceLength`.

    `update_and_fetch` writes a block at the length without moving it (the layers after
    this one still rotate from it); the owner commits the pass once for all layers.
    """

    def __init__(self, length: DeviceLength) -> None:
        self.length = length
        self.keys: mx.array | None = None
        self.values: mx.array | None = None

    @classmethod
    def from_caches(cls, caches: list[Any]) -> tuple[list[DeviceOffsetKVCache], DeviceLength]:
        """Copies of host-offset KVCaches' valid prefixes (all of one length)."""
        n = caches[0].offset
        length = DeviceLength(n)
        out = []
        for cache in caches:
            layer = cls(length)
            if n and cache.keys is not None:
                keys, values = cache.keys[..., :n, :], cache.values[..., :n, :]
                layer._reserve(keys, values, n)
                assert layer.keys is not None and layer.values is not None
                layer.keys[..., :n, :] = keys
                layer.values[..., :n, :] = values
            out.append(layer)
        return out, length

    @property
    def offset(self) -> mx.array:
        return self.length.offset

    def _reserve(self, keys: mx.array, values: mx.array, size: int) -> None:
        """Buffers holding at least `size` positions, the old contents kept."""
        if self.keys is not None and self.keys.shape[2] >= size:
            return
        old = 0 if self.keys is None else self.keys.shape[2]
        size = max(_bucket(size), old + GROWTH_TOKENS)
        b, h, _, dk = keys.shape
        new_keys = mx.zeros((b, h, size, dk), keys.dtype)
        new_values = mx.zeros((b, h, size, values.shape[3]), values.dtype)
        if self.keys is not None and self.values is not None and old:
            new_keys[..., :old, :] = self.keys
            new_values[..., :old, :] = self.values
        self.keys, self.values = new_keys, new_values

    def make_mask(self, n: int, *, return_array: bool = False, window_size: Any = None) -> Any:
        """[n, width]: query i sees the keys up to its own position, length + i."""
        if window_size is not None:
            raise NotImplementedError("sliding windows are not supported here")
        positions = self.length.offset + mx.arange(n, dtype=mx.int32)[:, None]
        return mx.arange(self.length.width(n), dtype=mx.int32)[None] <= positions

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        width = self.length.width(keys.shape[2])
        self._reserve(keys, values, width)
        assert self.keys is not None and self.values is not None
        index, axes = self.length.index(), (0, 1, 2, 3)
        self.keys = mx.slice_update(self.keys, keys, index, axes=axes)
        self.values = mx.slice_update(self.values, values, index, axes=axes)
        return self.keys[..., :width, :], self.values[..., :width, :]
