"""Why a prompt missed the cache: where it diverged from recently stored prompts (pure Python).

Clients that rewrite a small part of the prompt head every turn (a date, a token counter)
defeat prefix caching; the log line this feeds names the first differing token so the
culprit is easy to spot. Kept only while DEBUG logging is on, so it costs nothing otherwise.
"""

from __future__ import annotations

from array import array
from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Divergence:
    shared_tokens: int  # length of the longest common prefix with a stored prompt
    stored_tokens: int  # length of that stored prompt


def common_prefix_length(a: array, b: list[int]) -> int:
    n = min(len(a), len(b))
    lo = 0
    # Compare in strides first: long shared heads are the common case.
    stride = 256
    while lo + stride <= n and a[lo : lo + stride].tolist() == b[lo : lo + stride]:
        lo += stride
    while lo < n and a[lo] == b[lo]:
        lo += 1
    return lo


class RecentPrompts:
    """The last few stored token sequences of one model, bounded in count and tokens."""

    def __init__(self, max_prompts: int = 32, max_tokens: int = 2_000_000) -> None:
        self.max_prompts = max_prompts
        self.max_tokens = max_tokens
        self._prompts: deque[array] = deque()
        self._num_tokens = 0

    def add(self, tokens: list[int]) -> None:
        if not tokens or len(tokens) > self.max_tokens:
            return
        self._prompts.append(array("i", tokens))
        self._num_tokens += len(tokens)
        while len(self._prompts) > self.max_prompts or self._num_tokens > self.max_tokens:
            self._num_tokens -= len(self._prompts.popleft())

    def best_match(self, tokens: list[int]) -> Divergence | None:
        best: Divergence | None = None
        for stored in self._prompts:
            shared = common_prefix_length(stored, tokens)
            if best is None or shared > best.shared_tokens:
                best = Divergence(shared, len(stored))
        return best


def describe(d: Divergence, num_tokens: int, num_cached: int, block_size: int) -> str:
    """The DEBUG line: how much was shared, how much the block-aligned cache could reuse."""
    if d.shared_tokens >= num_tokens:
        return f"prompt of {num_tokens} tokens is a prefix of a stored one; reused {num_cached}"
    return (
        f"prompt of {num_tokens} tokens shares the first {d.shared_tokens} tokens with a "
        f"stored prompt of {d.stored_tokens} (diverges at token {d.shared_tokens}, block "
        f"{d.shared_tokens // block_size}); reused {num_cached} cached tokens"
    )
