"""GGUF tensor payloads to numpy: plain floats, MLX's affine layout, or de-quantized floats."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
from gguf import quants as gguf_quants

from omlx.errors import ImportFailed

# GGUF block quants whose blocks are exactly MLX affine groups of 32 (w = scale * q + bias),
# so they convert bit-for-bit without de-quantizing.
KEEPABLE_TYPES = frozenset(
    {GGMLQuantizationType.Q4_0, GGMLQuantizationType.Q4_1, GGMLQuantizationType.Q8_0}
)
FLOAT_TYPES = frozenset(
    {GGMLQuantizationType.F32, GGMLQuantizationType.F16, GGMLQuantizationType.BF16}
)
MLX_GROUP_SIZE = 32


@dataclass(slots=True)
class PackedTensor:
    """One weight in MLX's affine quantized layout; row i of each array is output feature i."""

    weight: np.ndarray  # uint32, (rows, cols * bits / 32)
    scales: np.ndarray  # float16, (rows, cols / 32)
    biases: np.ndarray  # float16, (rows, cols / 32)
    bits: int


def is_supported(qtype: GGMLQuantizationType) -> bool:
    """True when we can read this type at all (floats or a numpy de-quantizer in `gguf`)."""
    if qtype in FLOAT_TYPES:
        return True
    return qtype in gguf_quants._type_traits


def dequantize(raw: np.ndarray, qtype: GGMLQuantizationType, name: str) -> np.ndarray:
    """Return the tensor as float32 in numpy (row-major, GGUF's reversed shape order)."""
    if qtype == GGMLQuantizationType.F32:
        return np.asarray(raw, dtype=np.float32)
    if qtype == GGMLQuantizationType.F16:
        return np.asarray(raw).astype(np.float32)
    if qtype == GGMLQuantizationType.BF16:
        # bfloat16 is the top half of a float32; numpy has no bf16, so widen the bits.
        bits = np.asarray(raw).view(np.uint16).astype(np.uint32) << 16
        return bits.view(np.float32)
    if not is_supported(qtype):
        raise ImportFailed(f"tensor {name!r} uses quant type {qtype.name}, which omlx cannot read")
    try:
        return gguf_quants.dequantize(np.asarray(raw), qtype).astype(np.float32, copy=False)
    except NotImplementedError as exc:
        raise ImportFailed(
            f"tensor {name!r} uses quant type {qtype.name}, which omlx cannot de-quantize"
        ) from exc


def pack_for_mlx(raw: np.ndarray, qtype: GGMLQuantizationType, name: str) -> PackedTensor:
    """Re-lay a Q4_0/Q4_1/Q8_0 matrix as MLX affine groups without changing any value."""
    if qtype not in KEEPABLE_TYPES:
        raise ImportFailed(f"tensor {name!r}: quant type {qtype.name} cannot be kept quantized")
    raw = np.asarray(raw, dtype=np.uint8)
    block_size, type_size = GGML_QUANT_SIZES[qtype]
    assert block_size == MLX_GROUP_SIZE
    rows = raw.shape[0]
    blocks = raw.reshape(rows, -1, type_size)
    d = blocks[..., 0:2].copy().view(np.float16)[..., 0]
    if qtype == GGMLQuantizationType.Q8_0:
        # int8 q -> unsigned q + 128; w = d * q = d * (q + 128) - 128 d.
        signed = blocks[..., 2:].copy().view(np.int8)
        q = (signed.astype(np.int16) + 128).astype(np.uint8)
        return PackedTensor(
            weight=np.ascontiguousarray(q.reshape(rows, -1)).view(np.uint32),
            scales=d,
            biases=(d.astype(np.float32) * -128.0).astype(np.float16),
            bits=8,
        )
    if qtype == GGMLQuantizationType.Q4_1:
        bias = blocks[..., 2:4].copy().view(np.float16)[..., 0]
        qs = blocks[..., 4:]
    else:  # Q4_0: w = d * (q - 8)
        bias = (d.astype(np.float32) * -8.0).astype(np.float16)
        qs = blocks[..., 2:]
    # GGUF: byte j holds element j (low nibble) and element j + 16 (high nibble).
    # MLX: consecutive elements share a byte, low nibble first (little-endian uint32 words).
    q = np.concatenate([qs & 0x0F, qs >> 4], axis=-1)
    packed = (q[..., 0::2] | (q[..., 1::2] << 4)).astype(np.uint8)
    return PackedTensor(
        weight=np.ascontiguousarray(packed.reshape(rows, -1)).view(np.uint32),
        scales=d,
        biases=bias,
        bits=4,
    )
