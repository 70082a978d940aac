"""Block metadata and the longest reusable block-aligned prefix of a token list (pure Python)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from omlx.cache.chain_hash import BlockKey


@dataclass(frozen=True, slots=True)
class BlockInfo:
    """What the index knows of a block without touching its arrays.

    `has_window`: the block carries KV for the sliding-window layers (only blocks that
    were inside the window when stored do). `has_state`: it carries a snapshot of the
    recurrent layers' state taken exactly at its end. `partial`: a sequence's unfilled
    last block (`num_tokens` below the block size), kept in RAM only and found through the
    model's child index (child_index.py), never through the chain.
    """

    key: BlockKey
    model_fingerprint: str
    block_index: int  # position in its chain: block i covers tokens [i*B, (i+1)*B)
    num_tokens: int
    nbytes: int
    has_window: bool = True
    has_state: bool = False
    model_name: str = ""
    partial: bool = False


@dataclass(frozen=True, slots=True)
class ReuseRule:
    """What a model's layer kinds require of the last blocks of a reused prefix."""

    block_size: int
    needs_state: bool = False  # the model has recurrent layers (ArraysCache)
    window_tokens: int = 0  # largest sliding window; 0 = no sliding-window layers

    def is_usable(self, chain: list[BlockInfo], num_blocks: int) -> bool:
        """Whether the first `num_blocks` blocks of `chain` can seed a request."""
        if num_blocks <= 0:
            return False
        if self.needs_state and not chain[num_blocks - 1].has_state:
            return False
        if self.window_tokens:
            end = num_blocks * self.block_size
            first = max(0, end - self.window_tokens) // self.block_size
            if not all(b.has_window for b in chain[first:num_blocks]):
                return False
        return True


def match_chain(
    keys: Iterable[BlockKey], lookup: Callable[[BlockKey], BlockInfo | None]
) -> list[BlockInfo]:
    """Infos of the longest run of leading keys that `lookup` finds; stops at the first miss.

    `keys` may be lazy (chain_hash.iter_chain_keys), so no key past the first miss is hashed.
    """
    found: list[BlockInfo] = []
    for key in keys:
        info = lookup(key)
        if info is None:
            break
        found.append(info)
    return found


def longest_usable_prefix(chain: list[BlockInfo], max_blocks: int, rule: ReuseRule) -> int:
    """Number of leading blocks of `chain` to reuse: at most `max_blocks`, 0 if none fits."""
    for n in range(min(len(chain), max_blocks), 0, -1):
        if rule.is_usable(chain, n):
            return n
    return 0


def max_reusable_blocks(num_tokens: int, block_size: int) -> int:
    """Blocks a prompt of `num_tokens` may take from the cache: one token must stay to prefill,
    because the engine needs the logits of the last prompt token."""
    return max(0, (num_tokens - 1) // block_size)
