"""Attention of a few queries as one custom CUDA kernel a layer.

MLX 0.32's CUDA backend has a fused attention kernel only for up to 3 queries and no
array mask (its sdpa_vector rule). A batched decode step always brings one (BatchKVCache
masks every row's left padding), so on CUDA each layer takes the composed fallback:
`q @ k^T` as a batched GEMV that reads every key once per query head of the GQA group,
a select, a softmax and `probs @ v`, five graph nodes or more a layer. On an H200 with the
Qwen3-8B shape at 64 rows that attention took ~5 ms of a ~14 ms step's GPU time
(benchmarks/results/decode_step_anatomy_folded_h200.jsonl), and each node costs the
host tens of microseconds to record on a host-bound step.

Here one kernel does a layer's attention: a thread block per (row, KV head, chunk of
query vectors), so each key and value is read once for the whole GQA group; each warp
walks every WARPS-th tile of 32 keys, a key a lane (LANE_KEYS, the default; off, every
WARPS-th key a warp), with an online (flash) softmax, and the warps' partial results
are merged through shared memory. The mask is read as it is (boolean, any broadcast
shape over [B, H, L, S]); "causal" (L queries at the end of S keys) and None need no
array. Queries, keys and values are read through their strides, so the cache's slice
views and the transposed queries cost no copy, and the output is written in the
[B, L, H, D] layout the model reshapes next, returned as a [B, H, L, D] view.

Same math as MLX's fallback (scale, mask, float32 softmax), not the same rounding order.
On CUDA `engine.decode_attention = "auto"` (the default) installs it for batched
one-query steps and for the DFlash passes made inside `verifying()` (a served draft's
verifies: not the batch generator's short prefill chunks of the same architecture), and
"kernel" for every call `takes_kernel` accepts; `benchmarks/attention_kernel_check.py`
checks it against MLX's attention on the GPU and times both, and a test runs its source
on the host.
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import mlx.core as mx

from omlx.mlx_lm_compat.attention_kernel_source import (
    MASK_LOOKUP,
    SOURCE_KEY_A_LANE,
    SOURCE_KEY_A_WARP,
)
from omlx.mlx_lm_compat.attention_patch import patch_attention, restore_attention
from omlx.mlx_lm_compat.cuda_header import CONVERSIONS

_PATCHED = "_omlx_kernel_attention"
_EVERY_CALL = "_omlx_kernel_every_call"  # set on a model whose 1-16-query calls it takes
_IN_SCOPE = "_omlx_kernel_in_scope"  # set on a model whose verifies (verifying()) it takes
# A module with attention of its own (the DFlash draft's) declares this attribute, False;
# use_kernel_attention sets it True and the module then calls kernel_attention itself.
KERNEL_ATTENTION_FLAG = "attends_by_kernel"
MAX_QUERIES = 16  # a DFlash block; a longer pass is a prefill, where MLX's own is fused
HEAD_DIMS = (64, 96, 128, 256)  # whole warps of elements
_DTYPES = (mx.bfloat16, mx.float16, mx.float32)
WARPS = 8
# Candidates measured against the first kernel by benchmarks/attention_kernel_check.py
# (--variants): two elements a load (bfloat16 pairs), the next key's loads issued before
# this key's arithmetic, and several keys' loads issued together (KEY_BATCH > 1;
# PREFETCH_NEXT_KEY takes precedence over it). On an H100 (attention_kernel_keys_h100.jsonl)
# four keys together took the 8B shape's decode 8-12% faster (64-256 rows, head 128),
# and SmolLM2's (head 64) 20% slower: heads under KEY_BATCH_MIN_HEAD_DIM load one key.
PAIRED_LOADS = False
PREFETCH_NEXT_KEY = False
KEY_BATCH = 4
KEY_BATCH_MIN_HEAD_DIM = 128
# A key a lane instead of a key a warp (SOURCE_KEY_A_LANE; KEY_BATCH then plays no
# part). On an H100 (attention_check_h100_s18.jsonl, attention_kernel_lanes_h100.jsonl)
# it beat the loop above in every case timed: the 8B shape's decode at 64 / 128 / 256
# rows 2.78-2.85 / 5.21-5.36 / 9.80-9.90 ms against 3.50-3.56 / 6.44-6.78 / 12.49-12.75
# (36 layers), 64 rows over 2,100 keys 11.2-11.5 against 19.1-19.2, SmolLM2's 16-query
# DFlash verify 0.60-0.61 against 0.84-0.95, its 64-row decode 0.87 against 0.93.
LANE_KEYS = True
# Query vectors a block holds when a call has several queries (a DFlash verify or draft
# block); None: the register budget (16 for heads of 64). Fewer spread a lone verify's
# few blocks over more of the card, each reading the keys again from L2. On an H100
# (dflash_verify_h100_s19/call2, 30 layers chained) 4 took SmolLM2's 16-query verify
# 1.29 ms against 1.79 (causal) and 1.16 against 1.40 (array mask), its draft block
# 0.21 against 0.24; 2 and 8 were slower than 4.
MULTI_QUERY_BLOCK: int | None = 4


_kernels: dict[tuple[bool, bool], Any] = {}


def _kernel(masked: bool, lanes: bool) -> Any:
    """The compiled-on-first-use kernel object, with or without a mask input, with a key
    a warp (the first loop) or a key a lane (LANE_KEYS)."""
    kernel = _kernels.get((masked, lanes))
    if kernel is None:
        source = (SOURCE_KEY_A_LANE if lanes else SOURCE_KEY_A_WARP).replace(
            "MASK_LOOKUP", MASK_LOOKUP if masked else ""
        )
        names = ["queries", "keys", "values"] + (["mask"] if masked else [])
        kernel = mx.fast.cuda_kernel(
            name="omlx_attention" + ("_lanes" if lanes else "") + ("_masked" if masked else ""),
            input_names=names,
            output_names=["out"],
            source=source,
            header=CONVERSIONS,
            ensure_row_contiguous=False,  # strides are read; no copy of the cache views
        )
        _kernels[masked, lanes] = kernel
    return kernel


def queries_per_block(group: int, queries: int, head_dim: int) -> int:
    """Query vectors one block holds in registers: about 32 floats a lane for each of
    the queries and the output accumulators. One query (a decode step) takes its whole
    GQA group when it fits; several take MULTI_QUERY_BLOCK (at most the register
    budget) whatever their number, so that every count of 2-16 queries runs the same
    compiled kernel."""
    budget = 32 // (head_dim // 32)
    if queries == 1:
        return max(1, min(group, budget))
    return max(1, min(budget, MULTI_QUERY_BLOCK or budget))


def template_queries(queries: int) -> int:
    """The kernel's QLEN: 1 compiled in for a decode step, 0 (read at run time) else."""
    return 1 if queries == 1 else 0


def _mask_4d(mask: mx.array) -> mx.array:
    if mask.ndim == 4:
        return mask  # a reshape to the same shape would still be a graph node
    return mask.reshape((1,) * (4 - mask.ndim) + tuple(mask.shape))


def takes_kernel(queries: Any, keys: Any, values: Any, mask: Any) -> bool:
    """Whether `kernel_attention` computes this call: 1-16 queries of a supported head
    size and dtype, and a mask it can read (None, "causal" or boolean over the keys).
    Left to MLX: a lone unmasked query (its own fused kernel) and half-precision queries
    under "causal" (cuDNN's fused attention: 0.44 ms against the kernel's 0.82 for 30
    layers of a 16-query verify on an H100, attention_kernel_check_h100.jsonl)."""
    if not (isinstance(queries, mx.array) and queries.ndim == 4 and keys.ndim == 4):
        return False
    b, heads, n, d = queries.shape
    if not 1 <= n <= MAX_QUERIES or d not in HEAD_DIMS:
        return False
    if queries.dtype not in _DTYPES or keys.dtype != queries.dtype:
        return False
    if values.dtype != queries.dtype or values.shape[-1] != d or keys.shape[-1] != d:
        return False
    kv = keys.shape[1]
    if heads % kv or keys.shape[2] < n or keys.shape[0] != b:
        return False
    if mask is None:
        return n > 1
    if isinstance(mask, str):
        return mask == "causal" and takes_causal(queries.dtype)
    if not isinstance(mask, mx.array) or mask.dtype != mx.bool_ or not 1 <= mask.ndim <= 4:
        return False
    m = (1,) * (4 - mask.ndim) + tuple(mask.shape)
    return m[0] in (1, b) and m[1] in (1, heads) and m[2] in (1, n) and m[3] == keys.shape[2]


def takes_causal(dtype: Any) -> bool:
    """Whether the kernel takes this dtype's "causal" calls (see takes_kernel)."""
    return dtype == mx.float32


def takes_batched_decode(queries: Any, keys: Any, values: Any, mask: Any) -> bool:
    """`takes_kernel` for one query a row under an array mask: the batched decode step.
    A DFlash verify (several queries) keeps its own path, whose numbers match plain
    decoding's exactly (row_attention.py)."""
    return (
        isinstance(mask, mx.array)
        and isinstance(queries, mx.array)
        and queries.ndim == 4
        and queries.shape[2] == 1
        and takes_kernel(queries, keys, values, mask)
    )


_scope = threading.local()  # per engine thread: another model's steps stay outside


@contextmanager
def verifying() -> Iterator[None]:
    """Graph building inside this block (a DFlash target pass) hands every call of 1-16
    queries to the kernel, where `use_kernel_attention(batched_decode_only=True)` took
    only batched decode steps. Attention runs when the model is called, not when MLX
    evaluates, so the block goes around the call."""
    _scope.depth = getattr(_scope, "depth", 0) + 1
    try:
        yield
    finally:
        _scope.depth -= 1


def inside_verifying() -> bool:
    """Whether this thread is building a graph inside `verifying()`."""
    return getattr(_scope, "depth", 0) > 0


def takes_decode_or_verify(queries: Any, keys: Any, values: Any, mask: Any) -> bool:
    """`takes_batched_decode`, and inside `verifying()` every call `takes_kernel` takes."""
    if inside_verifying():
        return takes_kernel(queries, keys, values, mask)
    return takes_batched_decode(queries, keys, values, mask)


# (dtype, heads, kv heads, QLEN, head dim, masked, causal, scale) -> the call's template
# and queries per block; the rows and the number of queries only change the grid.
_variants: dict[tuple, tuple[list, int]] = {}


def _variant(dtype: Any, heads: int, kv: int, n: int, d: int, mask: Any, scale: float):
    qlen = template_queries(n)
    pairs, prefetch = PAIRED_LOADS and d % 64 == 0, PREFETCH_NEXT_KEY
    key_batch = 1 if prefetch or d < KEY_BATCH_MIN_HEAD_DIM else max(1, int(KEY_BATCH))
    key = (dtype, heads, kv, qlen, d, isinstance(mask, mx.array), isinstance(mask, str), scale)
    key += (pairs, prefetch, key_batch, LANE_KEYS, MULTI_QUERY_BLOCK)
    found = _variants.get(key)
    if found is None:
        group = heads // kv
        qpb = queries_per_block(group, n, d)
        (scale_bits,) = struct.unpack("<i", struct.pack("<f", float(scale)))
        template = [
            ("T", dtype),
            ("HEAD_DIM", d),
            ("GQA", group),
            ("KV_HEADS", kv),
            ("QLEN", qlen),
            ("QPB", qpb),
            ("WARPS", WARPS),
            ("PAIRS", pairs),
            ("PREFETCH", prefetch),
            ("KEY_BATCH", key_batch),
            ("CAUSAL", isinstance(mask, str)),
            ("SCALE_BITS", scale_bits),
        ]
        found = _variants[key] = (template, qpb, LANE_KEYS)
    return found


def kernel_attention(
    queries: mx.array, keys: mx.array, values: mx.array, scale: float, mask: Any
) -> mx.array:
    """queries [B, H, L, D]; keys, values [B, KV, S, D]; mask None, "causal" or boolean
    (True = attend) broadcastable to [B, H, L, S]. Returns [B, H, L, D]."""
    b, heads, n, d = queries.shape
    kv = keys.shape[1]
    template, qpb, lanes = _variant(queries.dtype, heads, kv, n, d, mask, scale)
    chunks = -(-(heads // kv) * n // qpb)
    masked = isinstance(mask, mx.array)
    inputs = [queries, keys, values, _mask_4d(mask)] if masked else [queries, keys, values]
    (out,) = _kernel(masked, lanes)(
        inputs=inputs,
        template=template,
        grid=(WARPS * 32, b * kv, chunks),
        threadgroup=(WARPS * 32, 1, 1),
        output_shapes=[(b, n, heads, d)],
        output_dtypes=[queries.dtype],
    )
    return out.transpose(0, 2, 1, 3)


def use_kernel_attention(model: Any, batched_decode_only: bool = False) -> int:
    """Route `model`'s attention of 1-16 queries (or, `batched_decode_only`, of one
    query a row under a padding mask, and of 1-16 inside `verifying()`) through
    `kernel_attention` (CUDA only: the caller checks). Patches the modules its layers
    come from; idempotent. Returns how many modules were patched now. Modules with
    attention of their own (a DFlash draft's block attention) take the kernel too,
    unless `batched_decode_only`."""
    takes = takes_decode_or_verify if batched_decode_only else takes_kernel
    if not batched_decode_only:
        _set_own_flag(model, True)
    object.__setattr__(model, _IN_SCOPE if batched_decode_only else _EVERY_CALL, True)
    return patch_attention(model, takes, kernel_attention, _PATCHED)


def kernel_takes_verifies(model: Any) -> bool:
    """Whether `use_kernel_attention` routed `model`'s DFlash verifies (calls of 1-16
    queries, inside `verifying()` where only batched decode is patched) through the
    kernel."""
    return getattr(model, _EVERY_CALL, False) or getattr(model, _IN_SCOPE, False)


def _set_own_flag(model: Any, value: bool) -> None:
    for _, module in model.named_modules():
        if hasattr(module, KERNEL_ATTENTION_FLAG):
            setattr(module, KERNEL_ATTENTION_FLAG, value)


def warm_kernel_attention(model: Any) -> bool:
    """Compile the batched decode step's kernel now, at load, not in the first step of
    two rows: MLX 0.32 keeps no disk copy of a custom kernel (its own it does), so each
    process compiles it once, ~1.4 s on an H100 (the first two-row step of every HTTP
    run, serving_scale_h100/http-trace-kernel-*.jsonl.gz). Two rows of one token each,
    one of them left-padded, through the model itself. False where the model's caches
    are not all plain KV caches (then the first step compiles it)."""
    from mlx_lm.models.cache import BatchKVCache, KVCache, make_prompt_cache

    if not all(type(c) is KVCache for c in make_prompt_cache(model)):
        return False
    cache = [BatchKVCache(left_padding=[1, 0]) for _ in range(len(model.layers))]
    mx.eval(model(mx.array([[0, 1], [1, 1]]), cache=cache))
    mx.eval(model(mx.array([[1], [1]]), cache=cache))
    return True


def restore_kernel_attention(model: Any) -> None:
    _set_own_flag(model, False)
    for mark in (_EVERY_CALL, _IN_SCOPE):
        if mark in model.__dict__:
            object.__delattr__(model, mark)
    restore_attention(model, _PATCHED)


__all__ = [
    "KERNEL_ATTENTION_FLAG",
    "inside_verifying",
    "kernel_attention",
    "kernel_takes_verifies",
    "queries_per_block",
    "restore_kernel_attention",
    "takes_batched_decode",
    "takes_causal",
    "takes_decode_or_verify",
    "takes_kernel",
    "use_kernel_attention",
    "verifying",
    "warm_kernel_attention",
]
