"""Prefill attention on a CPU with numpy's exponential instead of MLX's.

On x86 MLX 0.32 computes `exp` one element at a time (~24 ns an element on the 2-core CI
machine, where numpy's vectorised one takes ~4-7), and a prefill chunk's softmax is
queries x heads x keys of them: for SmolLM2 a 512-token chunk over 3,000 keys holds 14
million scores a layer, so the softmax, not the matmuls, was most of a long prompt's
prefill (an agent's 3,200-token prompt took 77 s to its first token on 2 cores). Here the
scores come from MLX's matmul, numpy takes the softmax, and MLX multiplies by the values.

A call's queries are taken in blocks whose scores stay under BLOCK_SCORES (16 MB of
float32): glibc serves allocations above 32 MB with a fresh mmap each time, whose page
faults cost more than the arithmetic, while smaller blocks reuse the heap. Each row's
softmax is its own; only the BLAS's rounding differs with the block's size.

Same math as MLX's fallback (scores in the model's dtype, softmax in float32, a masked
key at float32's lowest value so a fully masked row gives a uniform row, not NaN), not
the same rounding order: the first decoded token can differ from stock mlx-lm's where
two logits are within ~1e-5. Decode steps and DFlash verifies (fewer than MIN_QUERIES
queries) keep MLX's attention. `engine.cpu_prefill_attention` installs it (MLXBackend);
`benchmarks/cpu_prefill.py` times a long prompt's prefill both ways.
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx
import numpy as np

from omlx.mlx_lm_compat.attention_patch import patch_attention, restore_attention

_PATCHED = "_omlx_cpu_prefill_attention"
MIN_QUERIES = 64  # shorter calls are decode steps and verifies: MLX's own stays
BLOCK_SCORES = 4 * 1024 * 1024  # float32 scores a block: 16 MB
_LOWEST = float(np.finfo(np.float32).min)


def takes_cpu_prefill(queries: Any, keys: Any, values: Any, mask: Any) -> bool:
    """A prefill chunk: many queries, a causal, absent or array mask."""
    if queries.shape[2] < MIN_QUERIES or queries.shape[1] % keys.shape[1]:
        return False
    if isinstance(mask, str):
        return mask == "causal"
    return mask is None or isinstance(mask, mx.array)


def _bias(mask: Any, batch: int, kv_heads: int, group: int, n: int, s: int) -> mx.array | None:
    """The mask as float32 to add to [B, KV, G, L, S] scores: 0 kept, lowest masked."""
    if mask is None:
        return None
    # causal: the n queries are the last n of the s positions
    causal = isinstance(mask, str)
    keep = mx.arange(s - n, s)[:, None] >= mx.arange(s)[None] if causal else mask
    if keep.dtype == mx.bool_:
        bias = mx.where(keep, mx.array(0.0, mx.float32), mx.array(_LOWEST, mx.float32))
    else:
        bias = keep.astype(mx.float32)
    while bias.ndim < 4:
        bias = bias[None]
    if bias.shape[1] == 1:  # one mask for every head
        rows = bias.shape[0]
        return mx.broadcast_to(bias, (rows, 1, n, s)).reshape(rows, 1, 1, n, s)
    heads = (batch, kv_heads * group, n, s)
    return mx.broadcast_to(bias, heads).reshape(batch, kv_heads, group, n, s)


def _block(q: mx.array, k: mx.array, v: mx.array, scale: float, bias: mx.array | None):
    b, h, n, d = q.shape
    kv, s = k.shape[1], k.shape[2]
    g = h // kv
    scores = (q * scale).reshape(b, kv, g * n, d) @ k.swapaxes(-1, -2)
    scores = scores.reshape(b, kv, g, n, s).astype(mx.float32)
    if bias is not None:
        scores = scores + bias
    host = np.asarray(scores)  # evaluates; a view of MLX's buffer, read only here
    probs = host - host.max(axis=-1, keepdims=True)
    np.exp(probs, out=probs)
    probs /= probs.sum(axis=-1, keepdims=True)
    p = mx.array(probs).astype(v.dtype).reshape(b, kv, g * n, s)
    return (p @ v).reshape(b, h, n, d)


def cpu_prefill_attention(
    queries: mx.array, keys: mx.array, values: mx.array, scale: float, mask: Any
) -> mx.array:
    """Attention of [B, H, L, D] queries over [B, KV, S, D] keys and values."""
    b, h, n, _ = queries.shape
    kv, s = keys.shape[1], keys.shape[2]
    bias = _bias(mask, b, kv, h // kv, n, s)
    rows = max(1, BLOCK_SCORES // max(1, b * h * s))
    if rows >= n:
        return _block(queries, keys, values, scale, bias)
    outs = []
    for start in range(0, n, rows):
        end = min(n, start + rows)
        part = None if bias is None else bias[..., start:end, :]
        outs.append(_block(queries[:, :, start:end], keys, values, scale, part))
    return mx.concatenate(outs, axis=2)


def use_cpu_prefill_attention(model: Any) -> int:
    """Route `model`'s prefill attention through `cpu_prefill_attention` (the caller
    checks the device is a CPU); idempotent; how many modules were patched now."""
    return patch_attention(model, takes_cpu_prefill, cpu_prefill_attention, _PATCHED)


def restore_cpu_prefill_attention(model: Any) -> None:
    restore_attention(model, _PATCHED)


__all__ = [
    "MIN_QUERIES",
    "cpu_prefill_attention",
    "restore_cpu_prefill_attention",
    "takes_cpu_prefill",
    "use_cpu_prefill_attention",
]
