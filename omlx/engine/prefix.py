"""The prefix-cache seam: what the engine thread calls, with a no-op default.

The real implementation is `omlx.cache.prefix_cache` (`PrefixCache(...).for_model(...)`);
every method runs on the engine thread, which owns the MLX arrays involved.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol


class PrefixHooks(Protocol):
    # True: the loop holds finished sequences back while others decode, storing them
    # once it is idle (cache.store_while_busy).
    defer_stores: bool

    def fetch(
        self, tokens: Sequence[int], extra_keys: Sequence[Any] = ()
    ) -> tuple[list[Any] | None, int]:
        """Per-layer caches holding the longest cached prefix of tokens, and its length."""
        ...

    def store(
        self, tokens: Sequence[int], prompt_cache: list[Any], extra_keys: Sequence[Any] = ()
    ) -> None:
        """Keep the KV of tokens (prompt + generated, all in prompt_cache) for later."""
        ...


class NoPrefixHooks:
    """Caches nothing: every prompt is prefilled in full."""

    defer_stores = False

    def fetch(
        self, tokens: Sequence[int], extra_keys: Sequence[Any] = ()
    ) -> tuple[list[Any] | None, int]:
        return None, 0

    def store(
        self, tokens: Sequence[int], prompt_cache: list[Any], extra_keys: Sequence[Any] = ()
    ) -> None:
        return None
