"""Batched one-query attention with the GQA group folded into the query rows.

mlx-lm's model modules call `scaled_dot_product_attention`, imported from `base` into
each module. A batched decode step always brings an array mask (BatchKVCache marks every
row's left padding), and MLX 0.32 has no fused CUDA kernel that takes one: its composed
fallback runs, whose `q @ k^T` broadcasts over the GQA group ([B, kv, g, 1, d] @
[B, kv, 1, d, S]: a batched GEMV reading every key row once per query head) and whose
`probs @ v` is a pointer-array GEMM of one row per head. Folded, the same attention is
two plain strided batched matmuls ([B, kv, g, d] @ [B, kv, d, S]) that read each key and
value once. Same math (scale, mask, precise softmax), not the same rounding order.

`engine.decode_attention = "folded"` installs it (MLXBackend); whether it pays on a GPU
is what `benchmarks/decode_step_anatomy.py` measures (paths loop and loop_folded), so
MLX's own stays the default until then. Steps with several queries, no mask (a lone
row), attention sinks or a quantized cache keep mlx-lm's function.
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx

from omlx.mlx_lm_compat.attention_patch import patch_attention, restore_attention

_PATCHED = "_omlx_folded_decode"


def folded_attention(
    queries: mx.array, keys: mx.array, values: mx.array, scale: float, mask: mx.array
) -> mx.array:
    """queries [B, H, 1, d]; keys, values [B, kv, S, d]; mask boolean (True = attend) or
    additive, broadcastable to [B, 1 or H, 1, S]. Returns [B, H, 1, d]."""
    b, heads, n, d = queries.shape
    kv_heads = keys.shape[1]
    group = heads // kv_heads
    q = (queries * scale).reshape(b, kv_heads, group * n, d)
    scores = q @ keys.swapaxes(-1, -2)  # [B, kv, g, S]
    if mask.ndim == 4 and mask.shape[1] == heads and heads != 1:
        mask = mask.reshape(mask.shape[0], kv_heads, group * n, mask.shape[-1])
    if mask.dtype == mx.bool_:
        scores = mx.where(mask, scores, mx.array(-mx.inf, scores.dtype))
    else:
        scores = scores + mask.astype(scores.dtype)
    probs = mx.softmax(scores, axis=-1, precise=True)
    return (probs @ values).reshape(b, heads, n, d)


def _takes_folded(queries: mx.array, keys: mx.array, values: mx.array, mask: Any) -> bool:
    return queries.shape[2] == 1 and isinstance(mask, mx.array)


def use_folded_decode_attention(model: Any) -> int:
    """Route `model`'s batched one-query attention through `folded_attention`.

    Patches the modules its layers come from (so every model of those architectures in
    the process); idempotent. Returns how many modules were patched now.
    """
    return patch_attention(model, _takes_folded, folded_attention, _PATCHED)


def restore_decode_attention(model: Any) -> None:
    """Undo `use_folded_decode_attention` for the modules of `model`'s layers."""
    restore_attention(model, _PATCHED)


__all__ = ["folded_attention", "restore_decode_attention", "use_folded_decode_attention"]
