"""How an encoder's inputs are grouped into forward passes (plain Python, no MLX).

Inputs go in order of length, so a batch pads little. On a CPU a batch is also capped by
its padded tokens (CPU_BATCH_TOKENS): MLX's arrays there come from glibc, which maps each
one above 32 MB afresh, and a batch of 32 x 256 tokens makes ~50 MB intermediates in a
MiniLM layer, whose page faults cost more than the arithmetic. Passes of at most 2,048
tokens ran that batch 1.40x faster on 2 cores, and 8 x 512 tokens 1.11x
(benchmarks/results/cpu_embeddings.md).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

CPU_BATCH_TOKENS = 2048


def by_length(lengths: Sequence[int]) -> list[int]:
    """Input indices, shortest first."""
    return sorted(range(len(lengths)), key=lambda i: lengths[i])


def batches(
    lengths: Sequence[int], order: Sequence[int], max_rows: int, max_tokens: int | None
) -> Iterator[list[int]]:
    """Consecutive runs of `order` (indices into `lengths`, shortest first) of at most
    `max_rows` inputs whose padded size (rows x the longest) stays within `max_tokens`;
    an input longer than that goes alone."""
    start = 0
    while start < len(order):
        end = start + 1
        while end < len(order) and end - start < max_rows:
            if max_tokens is not None and (end - start + 1) * lengths[order[end]] > max_tokens:
                break
            end += 1
        yield list(order[start:end])
        start = end


__all__ = ["CPU_BATCH_TOKENS", "batches", "by_length"]
