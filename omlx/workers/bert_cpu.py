"""omlx's BERT on a CPU: attention with numpy's softmax, GELU's erf as a rational function.

On x86 MLX 0.32 computes `exp` and `erf` one element at a time (~21 and ~45 ns an element
on the 2-core CI machine, where a multiply takes ~0.5), so an encoder's softmax (batch x
heads x tokens x tokens exponentials a layer) and its exact GELU (tokens x intermediate
erfs a layer) cost as much as its matmuls: all-MiniLM-L6-v2 spent ~3 s of an 11-s batch
of 32 x 256 tokens in each. Here the softmax goes through the LLMs' CPU prefill attention
(numpy's vectorised exponential; calls of 64 queries or more, like theirs) and GELU's
erf is a rational function of x^2 (multiplies, adds and one divide, compiled into one
pass), computed in float32: erf to within 5e-8 in float64 and 4.4e-7 in float32, so the
GELU is within ~1e-6 of the exact one (MLX's own within ~5e-7).
`benchmarks/cpu_embeddings.py` times a batch both ways.
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx
import mlx.nn as nn

from omlx.mlx_lm_compat.cpu_prefill_attention import cpu_prefill_attention, takes_cpu_prefill

# erf(u) = u * P(u^2) / Q(u^2) on |u| <= 4 (erf(4) is 1 to within 2e-8), a least-squares
# fit reweighted toward the largest error (fitted here, not taken from a library).
ERF_P = (
    1.128378711383967,
    0.20160880539183035,
    0.054175014943777695,
    0.004234860329949228,
    0.00029353930798858494,
    1.9367333302933165e-06,
)
ERF_Q = (
    1.0,
    0.5120001298042297,
    0.1186924134409909,
    0.01590440120841981,
    0.0012731327126321015,
    3.737521268324523e-05,
)
_SQRT_HALF = 0.7071067811865476


def _horner(coeffs: tuple[float, ...], z: mx.array) -> mx.array:
    acc = mx.array(coeffs[-1], z.dtype)
    for c in reversed(coeffs[:-1]):
        acc = acc * z + c
    return acc


def erf_rational(u: mx.array) -> mx.array:
    u = mx.clip(u, -4.0, 4.0)
    z = u * u
    return u * _horner(ERF_P, z) / _horner(ERF_Q, z)


@mx.compile
def gelu_rational(x: mx.array) -> mx.array:
    """The exact (erf) GELU, with `erf_rational` for MLX's scalar erf; in float32 for
    half-precision inputs too (the rational loses digits in bfloat16)."""
    y = x.astype(mx.float32)
    return (0.5 * y * (1 + erf_rational(y * _SQRT_HALF))).astype(x.dtype)


def attention(q: mx.array, k: mx.array, v: mx.array, *, scale: float, mask: Any) -> mx.array:
    """mx.fast.scaled_dot_product_attention's call, numpy's softmax for 64 queries or more."""
    if takes_cpu_prefill(q, k, v, mask):
        return cpu_prefill_attention(q, k, v, scale, mask)
    return mx.fast.scaled_dot_product_attention(q, k, v, scale=scale, mask=mask)


def use_cpu_paths(model: Any) -> int:
    """Route a BertModel's attention, and its GELU where it is the exact one, through
    the functions above; how many layers now take them."""
    layers = model.encoder.layer
    for layer in layers:
        layer.attention.self._attend = attention
        if layer.intermediate._act is nn.gelu:
            layer.intermediate._act = gelu_rational
    return len(layers)


__all__ = ["ERF_P", "ERF_Q", "attention", "erf_rational", "gelu_rational", "use_cpu_paths"]
