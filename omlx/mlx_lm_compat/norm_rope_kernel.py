"""Qwen3's per-head query and key norms and their rotation as one CUDA kernel a layer.

Qwen3's attention (mlx_lm.models.qwen3) normalises every query and key head (q_norm,
k_norm: RMSNorm over the head) and rotates both (RoPE) before the cache takes the keys:
two reshapes, two norms, two transposes and two rotations, eight graph nodes and four
kernels a layer. A decode step on CUDA is bound by the host's work per graph node (~9 ms
of host time for the 8B shape's 36 layers, about as long as the GPU's part at 64 rows:
benchmarks/results/serving_scale_h200.md), so here one kernel does all of it: it reads
the projection's query and key outputs ([B, L, heads * D], strided views of the fused
projection) as they are, and writes the rotated queries [B, H, L, D] and keys
[B, KV, L, D] that attention and the cache take next.

A warp per head vector: each lane holds D / 32 elements (lane + 32 e), the sum of squares
is a warp reduction, and RoPE's pairs (d, d + D / 2) sit in the same lane, so the
rotation needs no exchange. Same math as MLX's rms_norm (float32 sum of squares, the
normalised value rounded to the dtype) followed by its rope (float32 angles, base^(-2i/D),
positions from the cache's offset: one per row for a batch cache), not the same rounding
order in every step. `engine.fused_norm_rope` installs it (MLXBackend);
`benchmarks/norm_rope_check.py` compares it with MLX's on a GPU, and a test runs the
source on the host. On an H100 (seventeenth session, serving_scale_h200.md) it took
36 layers' norms and rotations from 0.84 to 0.64 ms of GPU time and 0.70 to 0.48 ms of
host time, and over HTTP gained nothing measurable, so it stays off.
"""

from __future__ import annotations

import functools
import math
import struct
import sys
from typing import Any

import mlx.core as mx
import mlx.nn as nn

from omlx.mlx_lm_compat.cuda_header import CONVERSIONS

HEAD_DIMS = (64, 128, 256)  # pairs (d, d + D/2) in one lane: D/2 a multiple of 32
_DTYPES = (mx.bfloat16, mx.float16, mx.float32)
WARPS = 4  # head vectors a block

_HEADER = CONVERSIONS

_SOURCE = """
  constexpr int E = HEAD_DIM / 32;  // elements a lane holds: lane + 32 e
  const int lane = threadIdx.x & 31;
  const int vec = blockIdx.x * WARPS + (threadIdx.x >> 5);  // (b, l, head) of this warp
  const int B = queries_shape[0];
  const int L = queries_shape[1];
  constexpr int PER_TOKEN = HEADS + KV_HEADS;
  if (vec >= B * L * PER_TOKEN) {
    return;  // the whole warp: no shuffle is left waiting
  }
  const int h = vec % PER_TOKEN;
  const int b = vec / (PER_TOKEN * L);
  const int l = vec / PER_TOKEN - b * L;
  const bool is_q = h < HEADS;
  const int hh = is_q ? h : h - HEADS;
  const T* src = is_q
      ? queries + b * queries_strides[0] + l * queries_strides[1]
          + int64_t(hh) * HEAD_DIM * queries_strides[2]
      : keys + b * keys_strides[0] + l * keys_strides[1]
          + int64_t(hh) * HEAD_DIM * keys_strides[2];
  const int64_t step = is_q ? queries_strides[2] : keys_strides[2];
  const T* w = is_q ? q_weight : k_weight;

  float x[E];
  float ss = 0.f;
#pragma unroll
  for (int e = 0; e < E; ++e) {
    x[e] = omlx_cuda::to_float(src[(lane + 32 * e) * step]);
    ss += x[e] * x[e];
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    ss += __shfl_xor_sync(0xffffffff, ss, off);
  }
  const float r = rsqrtf(ss / HEAD_DIM + __int_as_float(EPS_BITS));
#pragma unroll
  for (int e = 0; e < E; ++e) {  // the norm's output as the dtype holds it
    const float normed = omlx_cuda::to_float(
        omlx_cuda::from_float<T>(x[e] * r));
    x[e] = omlx_cuda::to_float(
        omlx_cuda::from_float<T>(normed * omlx_cuda::to_float(w[lane + 32 * e])));
  }

  const int pos = offset[offset_shape[0] == 1 ? 0 : b] + l;
  const float position = __int_as_float(SCALE_BITS) * float(pos);
  const float log2_step = __int_as_float(LOG2_STEP_BITS);  // log2(base) * 2 / D
  T* dst = is_q ? q_out + ((int64_t(b) * HEADS + hh) * L + l) * HEAD_DIM
                : k_out + ((int64_t(b) * KV_HEADS + hh) * L + l) * HEAD_DIM;
#pragma unroll
  for (int e = 0; e < E / 2; ++e) {
    const int d = lane + 32 * e;  // pairs with d + HEAD_DIM / 2, element e + E / 2
    const float theta = position * exp2f(-float(d) * log2_step);
    float s;
    float c;
    sincosf(theta, &s, &c);
    const float x1 = x[e];
    const float x2 = x[e + E / 2];
    dst[d] = omlx_cuda::from_float<T>(x1 * c - x2 * s);
    dst[d + HEAD_DIM / 2] = omlx_cuda::from_float<T>(x1 * s + x2 * c);
  }
"""

_kernel_object: list[Any] = []


def _kernel() -> Any:
    if not _kernel_object:
        _kernel_object.append(
            mx.fast.cuda_kernel(
                name="omlx_norm_rope",
                input_names=["queries", "keys", "q_weight", "k_weight", "offset"],
                output_names=["q_out", "k_out"],
                source=_SOURCE,
                header=_HEADER,
                ensure_row_contiguous=False,  # strides are read: the projection's views
            )
        )
    return _kernel_object[0]


def _bits(x: float) -> int:
    (bits,) = struct.unpack("<i", struct.pack("<f", float(x)))
    return bits


@functools.cache
def _template(
    dtype: Any, d: int, heads: int, kv_heads: int, eps: float, base: float, scale: float
) -> list[tuple[str, Any]]:
    """The kernel's template for a layer's shape: built once, since every layer of
    every step calls with the same one (this kernel is there to cut host work)."""
    return [
        ("T", dtype),
        ("HEAD_DIM", d),
        ("HEADS", heads),
        ("KV_HEADS", kv_heads),
        ("WARPS", WARPS),
        ("EPS_BITS", _bits(eps)),
        ("SCALE_BITS", _bits(scale)),
        ("LOG2_STEP_BITS", _bits(math.log2(base) * 2 / d)),
    ]


def norm_rope(
    queries: mx.array,
    keys: mx.array,
    q_weight: mx.array,
    k_weight: mx.array,
    *,
    heads: int,
    kv_heads: int,
    eps: float,
    base: float,
    scale: float,
    offset: Any,
) -> tuple[mx.array, mx.array]:
    """queries [B, L, heads * D] and keys [B, L, kv_heads * D] (any strides) ->
    RMSNorm'd and rotated queries [B, heads, L, D] and keys [B, kv_heads, L, D].
    `offset`: the position of the first of the L tokens, an int or one per row."""
    b, n, width = queries.shape
    d = width // heads
    if not isinstance(offset, mx.array):
        offsets = mx.array([int(offset)], dtype=mx.int32)
    else:  # a batch cache's, one a row: int32 and 1-d already (no graph node then)
        offsets = offset if offset.ndim == 1 else offset.reshape(-1)
        offsets = offsets if offsets.dtype == mx.int32 else offsets.astype(mx.int32)
    template = _template(queries.dtype, d, heads, kv_heads, eps, base, scale)
    vectors = b * n * (heads + kv_heads)
    q_out, k_out = _kernel()(
        inputs=[queries, keys, q_weight, k_weight, offsets],
        template=template,
        grid=(-(-vectors // WARPS) * WARPS * 32, 1, 1),
        threadgroup=(WARPS * 32, 1, 1),
        output_shapes=[(b, heads, n, d), (b, kv_heads, n, d)],
        output_dtypes=[queries.dtype, queries.dtype],
    )
    return q_out, k_out


def fits(attention: Any) -> bool:
    """Whether `attention` is a module this kernel can take over: Qwen3's Attention
    with plain RoPE (no scaling schedule) over the whole head, RMSNorms of the head's
    size, and a supported head size."""
    rope, q_norm, k_norm = (getattr(attention, a, None) for a in ("rope", "q_norm", "k_norm"))
    if type(rope) is not nn.RoPE or rope.traditional:
        return False
    if type(q_norm) is not nn.RMSNorm or type(k_norm) is not nn.RMSNorm:
        return False
    d = q_norm.weight.shape[0]
    if rope.dims != d or k_norm.weight.shape[0] != d or d not in HEAD_DIMS:
        return False
    if q_norm.weight.dtype not in _DTYPES or q_norm.eps != k_norm.eps:
        return False
    return type(attention).__module__ == "mlx_lm.models.qwen3"


class _NormRopeAttention:
    """Mixin in front of mlx_lm.models.qwen3.Attention: the same computation, the
    norms and rotations of queries and keys by `norm_rope`. Activations of another dtype
    or a quantized cache take the model's own code."""

    def __call__(self, x: mx.array, mask: Any = None, cache: Any = None) -> mx.array:
        if x.dtype not in _DTYPES or hasattr(cache, "bits"):
            return super().__call__(x, mask=mask, cache=cache)  # type: ignore[misc]
        b, n, _ = x.shape
        queries, keys, values = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        queries, keys = norm_rope(
            queries,
            keys,
            self.q_norm.weight,
            self.k_norm.weight,
            heads=self.n_heads,
            kv_heads=self.n_kv_heads,
            eps=self.q_norm.eps,
            base=self.rope.base,
            scale=self.rope.scale,
            offset=cache.offset if cache is not None else 0,
        )
        values = values.reshape(b, n, self.n_kv_heads, -1).transpose(0, 2, 1, 3)
        if cache is not None:
            keys, values = cache.update_and_fetch(keys, values)
        # The module's own name, so the attention patches (attention_patch.py) apply.
        attention = sys.modules[type(self).__mro__[2].__module__].scaled_dot_product_attention
        output = attention(queries, keys, values, cache=cache, scale=self.scale, mask=mask)
        return self.o_proj(output.transpose(0, 2, 1, 3).reshape(b, n, -1))


_classes: dict[type, type] = {}


def use_norm_rope(model: Any) -> int:
    """Swap the class of every Qwen3 attention module of `model` that `fits` for one
    whose queries and keys go through `norm_rope` (CUDA only: the caller checks); the
    parameters stay where they are. Returns how many modules changed."""
    swapped = 0
    for _, module in model.named_modules():
        cls = type(module)
        if cls in _classes.values() or not fits(module):
            continue
        fused = _classes.get(cls)
        if fused is None:
            fused = _classes[cls] = type(f"NormRope{cls.__name__}", (_NormRopeAttention, cls), {})
        module.__class__ = fused
        swapped += 1
    return swapped


def restore_norm_rope(model: Any) -> None:
    for _, module in model.named_modules():
        if type(module) in _classes.values():
            module.__class__ = type(module).__mro__[2]


__all__ = ["fits", "norm_rope", "restore_norm_rope", "use_norm_rope"]
