"""RotatingKVCache's ring buffer, read in token order and restored (its private fields).

A rotating cache keeps the last `max_size` positions in a ring whose write index is
`_idx`; `_temporal_order` unrolls it. The block cache needs both to slice and rebuild it.
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx


def rotating_in_order(cache: Any) -> tuple[mx.array, mx.array]:
    """Keys and values of a RotatingKVCache, oldest position first."""
    return cache._temporal_order(cache.keys), cache._temporal_order(cache.values)


def restore_rotating(
    cache: Any, keys: mx.array, values: mx.array, num_tokens: int, num_held: int
) -> None:
    """Set a RotatingKVCache to hold `num_held` positions in order, ending at `num_tokens`."""
    cache.keys, cache.values = keys, values
    cache.offset, cache._idx = num_tokens, num_held
