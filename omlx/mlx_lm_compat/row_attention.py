"""Attention of a few queries as batched matrix-vector products, on CUDA.

The attention twin of row_gemv.py. MLX 0.32's CUDA backend has a fused kernel only for
up to 3 queries without an array mask. A pass of 4..16 queries (a DFlash verify or
draft block, a short prefill chunk), or a masked one, takes the composed fallback
(half-precision queries under a causal mask go to cuDNN instead, and are left there),
whose `q @ k^T` and `probs @ v` are matmuls of several rows: cuBLASLt calls that MLX records by
stream capture into a child graph, two per layer, a host cost of tens of microseconds
each on a host-bound step. Here every query is its own vector: viewed as (rows, 1, d)
with both inner strides 1 (which MLX does not fold back into a matrix) against its head's
keys broadcast over the queries, so both products are MLX's own batched gemv kernel,
plain graph nodes. Every query re-reads its head's keys and values, which pays only
while they stay in the GPU's L2 cache (`max_kv_bytes`): short contexts and small models.

Same math as MLX's fallback (scale, mask, precise softmax), not the same rounding order.
"""

from __future__ import annotations

import threading
from typing import Any

import mlx.core as mx

from omlx.mlx_lm_compat.attention_patch import (
    patch_attention,
    restore_attention,
    restore_attention_everywhere,
)

_PATCHED = "_omlx_row_attention"
# A module with attention of its own (the DFlash draft's) declares this attribute, False;
# use_row_gemv sets it True and the module then calls row_attention itself.
ROW_ATTENTION_FLAG = "attends_by_rows"
DEFAULT_MAX_ROWS = 16  # a DFlash block
# MLX 0.32's CUDA attention runs up to 3 queries with no array mask in its fused vector
# kernel (its sdpa_vector rule): only more, or masked ones, take the composed fallback.
MIN_FUSED_ROWS = 4
# Keys and values of one layer, both: well inside an H100 / H200's 50 MB of L2.
DEFAULT_MAX_KV_BYTES = 8 << 20


def _as_vectors(x: mx.array) -> mx.array:
    """(..., n) -> (..., 1, n) with strides (n, 1, 1): transposed vectors to MLX."""
    return mx.swapaxes(mx.expand_dims(x, -1), -1, -2)


_recent = threading.local()  # the last causal mask: every layer of a pass shares it


def _causal_keep(rows: int, length: int) -> mx.array:
    key = (rows, length)
    if getattr(_recent, "key", None) != key:
        last = (length - rows) + mx.arange(rows)
        _recent.keep = (mx.arange(length)[None] <= last[:, None]).reshape(rows, 1, length)
        _recent.key = key
    return _recent.keep


def _lowest(dtype: mx.Dtype) -> mx.array:
    """What a masked score becomes: the dtype's lowest finite value, as MLX's own
    attention uses. A query that sees no key (a left-padded row's padding) then averages
    the values instead of giving NaN, which the next layer's keys and values would carry
    into the row's real tokens (0 x NaN in the values product)."""
    return mx.array(mx.finfo(dtype).min, dtype)


def _mask_rows(mask: Any, scores: mx.array, heads: int, group: int) -> mx.array:
    """`scores` (B, kv, g, R, 1, S) masked: "causal" (aligned to the keys' end, as MLX's
    fast attention aligns it) or an array broadcastable to (B, H, R, S), boolean (True =
    attend) or additive."""
    rows, length = scores.shape[3], scores.shape[-1]
    if isinstance(mask, str):
        if mask != "causal":
            raise ValueError(f"unsupported attention mask {mask!r}")
        return mx.where(_causal_keep(rows, length), scores, _lowest(scores.dtype))
    m = mask
    while m.ndim < 4:
        m = m[None]
    mb, mh, mr, ms = m.shape
    if mh == heads and heads != 1:
        m = m.reshape(mb, heads // group, group, mr, 1, ms)
    else:
        m = m.reshape(mb, 1, 1, mr, 1, ms)
    if m.dtype == mx.bool_:
        return mx.where(m, scores, _lowest(scores.dtype))
    return scores + m.astype(scores.dtype)


def row_attention(
    queries: mx.array, keys: mx.array, values: mx.array, scale: float, mask: Any = None
) -> mx.array:
    """queries (B, H, R, d); keys, values (B, kv, S, d); mask None, "causal" or an array
    broadcastable to (B, H, R, S). Returns (B, H, R, d)."""
    b, heads, rows, d = queries.shape
    kv_heads = keys.shape[1]
    group = heads // kv_heads
    q = (queries * scale).reshape(b, kv_heads, group, rows, d)
    keys_t = mx.expand_dims(mx.swapaxes(keys, -1, -2), (2, 3))  # (B, kv, 1, 1, d, S)
    scores = _as_vectors(q) @ keys_t  # (B, kv, g, R, 1, S)
    if mask is not None:
        scores = _mask_rows(mask, scores, heads, group)
    probs = mx.softmax(scores, axis=-1, precise=True).squeeze(-2)  # (B, kv, g, R, S)
    # MLX's gemv takes a matrix times a vector only with a reduction length that is a
    # multiple of 32 and a row-major matrix: the values transposed to (d, S) and both
    # padded with zeros along S (a pad adds nothing to the sums). Otherwise this product
    # is a cuBLAS call, captured, one a layer (the H200 probe's 31 captures a pass).
    pad = -probs.shape[-1] % 32
    values_t = mx.swapaxes(values, -1, -2)  # (B, kv, d, S)
    if pad:
        values_t = mx.pad(values_t, [(0, 0), (0, 0), (0, 0), (0, pad)])
        probs = mx.pad(probs, [(0, 0)] * 4 + [(0, pad)])
    else:
        values_t = mx.contiguous(values_t)
    out = mx.expand_dims(values_t, (2, 3)) @ mx.expand_dims(probs, -1)  # (B, kv, g, R, d, 1)
    return out.reshape(b, heads, rows, values.shape[-1])


def takes_rows(
    queries: mx.array,
    keys: mx.array,
    values: mx.array,
    mask: Any = None,
    max_rows: int = DEFAULT_MAX_ROWS,
    max_kv_bytes: int = DEFAULT_MAX_KV_BYTES,
) -> bool:
    """Whether `row_attention` is the cheaper path for this call's shapes. Under
    MIN_FUSED_ROWS queries without an array mask MLX's own fused vector kernel runs them
    (no capture: the H200 probe's 2-row pass had none), so those stay MLX's."""
    rows = queries.shape[2]
    fewest = 2 if isinstance(mask, mx.array) else MIN_FUSED_ROWS
    return fewest <= rows <= max_rows and keys.nbytes + values.nbytes <= max_kv_bytes


def _takes_patched(queries: mx.array, keys: mx.array, values: mx.array, mask: Any) -> bool:
    # Half-precision queries with a "causal" mask (or none) run in cuDNN, one graph node
    # a layer, which row attention has not been measured against: those stay MLX's. An
    # array mask (a DFlash verify's bucketed keys, a batch's padding) takes the composed
    # fallback in any precision, and float32 always does.
    return (
        isinstance(keys, mx.array)
        and (isinstance(mask, mx.array) or queries.dtype == mx.float32)
        and takes_rows(queries, keys, values, mask)
    )


def _computes(queries: mx.array, keys: mx.array, values: mx.array, scale: float, mask: Any):
    return row_attention(queries, keys, values, scale, mask)  # looked up per call (tests)


def use_row_attention(model: Any) -> int:
    """Route the few-query attention of `model`'s layers through `row_attention`.

    Patches the mlx-lm modules its layers come from (every model of those architectures
    in the process: the shape guard keeps long contexts and large heads on MLX's own
    path); idempotent. Returns how many modules were patched now.
    """
    return patch_attention(model, _takes_patched, _computes, _PATCHED)


def restore_row_attention(model: Any) -> None:
    """Undo `use_row_attention` for the modules of `model`'s layers."""
    restore_attention(model, _PATCHED)


def restore_all_row_attention() -> None:
    """Undo `use_row_attention` in every loaded module (tests)."""
    restore_attention_everywhere(_PATCHED)


__all__ = [
    "DEFAULT_MAX_KV_BYTES",
    "ROW_ATTENTION_FLAG",
    "restore_all_row_attention",
    "restore_row_attention",
    "row_attention",
    "takes_rows",
    "use_row_attention",
]
