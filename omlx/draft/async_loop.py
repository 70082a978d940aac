"""DFlash cycles queued one ahead: the host builds cycle k + 1 before it reads cycle k.

The pipelined loop (loop.py) drafts from a verify the host has not read, but must read
each verify before it builds the next one: the target's rollback is `KVCache.trim` of
a host count. Here the target's and the draft's caches keep their lengths on the device
(device_cache.py), so the verify's outcome (accepted drafts, bonus token) rolls both
back on the device, and the next draft and verify are queued straight away. The host
reads cycle k only after cycle k + 1 is queued, so on a small target, where building a
pass takes the host about as long as the device takes to run it, the two overlap
instead of adding up.

Same tokens as the pipelined loop: the same graphs, fed the same way; only the caches
differ (keys past a query's position are masked instead of trimmed).

Off by default (`DFlashGenerator(queue_ahead=True)` turns it on): measured on an H100
(benchmarks/results/dflash_verify_h100_s19/call5, SmolLM2 float32, a 4-layer draft),
its cycle took 8.60 ms against the pipelined loop's 7.57 with omlx's attention kernel,
and 12.47 against 10.52 with row attention. There the host's work a cycle (building
the graphs and recording them for the GPU) is most of the cycle whichever loop runs,
so queuing ahead gains no overlap, and its masks and writes add graph nodes (in MLX
0.32 a write at a device offset is one more GPU operation than a host-offset write, and
copies the whole buffer while a queued pass still reads it). It is kept for devices
where recording is cheap next to the device's work.
"""

from __future__ import annotations

import time
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import mlx.core as mx
import mlx.nn as nn

from omlx.draft.device_cache import DeviceOffsetKVCache
from omlx.mlx_lm_compat import KVCache

if TYPE_CHECKING:
    from omlx.draft.loop import DFlashGenerator, DFlashParams
    from omlx.draft.stats import DFlashStats


def runs_async(generator: DFlashGenerator, cache: list[Any]) -> bool:
    """Whether the target's cache and RoPE allow device-side lengths: plain KV caches
    only (no recurrent layers to replay), and MLX's own RoPE (it takes an array offset),
    with a drafter that keeps device-length caches too."""
    drafter = generator.drafter
    return (
        hasattr(drafter, "start_device")
        and all(isinstance(c, KVCache) for c in cache)
        and all(
            type(getattr(getattr(layer, "self_attn", None), "rope", None)) is nn.RoPE
            for layer in generator.target.layers
        )
    )


def async_cycles(
    generator: DFlashGenerator,
    committed: list[int],
    context: mx.array,
    cache: list[Any],
    params: DFlashParams,
    mask: mx.array | None,
    stats: DFlashStats,
    num_emitted: int,
    start: float,
) -> Generator[list[int], None, None]:
    """Every cycle of a request after its first token, up to `params.max_tokens`."""
    drafter: Any = generator.drafter
    size = drafter.draft_block_size
    device_cache, length = DeviceOffsetKVCache.from_caches(cache)
    drafter.start_device()
    t0 = time.perf_counter()
    anchor = mx.array([committed[-1]], dtype=mx.uint32)
    logits = drafter.propose_committing(context, mx.array(context.shape[1], mx.int32), anchor)
    draft = generator.draft_tokens(logits, params, mask)
    t1 = time.perf_counter()
    stats.draft_s += t1 - t0
    pending = generator.queue_verify(anchor, draft, device_cache, params, mask)
    stats.verify_s += time.perf_counter() - t1
    while num_emitted < params.max_tokens:
        t0 = time.perf_counter()
        logits = drafter.propose_committing(pending.hidden, pending.num_valid, pending.bonus)
        next_draft = generator.draft_tokens(logits, params, mask)
        t1 = time.perf_counter()
        stats.draft_s += t1 - t0
        queued = generator.queue_verify(pending.bonus, next_draft, device_cache, params, mask)
        draft_ids = pending.draft.tolist()
        num_kept = pending.num_valid.item() - 1
        new_tokens = [*draft_ids[:num_kept], pending.bonus.item()]
        stats.verify_s += time.perf_counter() - t1
        committed += new_tokens
        # What the host now knows: every committed token but the last is in both caches;
        # the target's holds the queued verify's block besides.
        t3 = time.perf_counter()
        known = len(committed) - 1
        length.settle(known + size)
        drafter.settle(known)
        stats.rollback_s += time.perf_counter() - t3
        new_tokens = new_tokens[: params.max_tokens - num_emitted]
        stats.acceptance_lengths.append(len(new_tokens))
        num_emitted += len(new_tokens)
        stats.total_s = time.perf_counter() - start
        yield new_tokens
        pending = queued
