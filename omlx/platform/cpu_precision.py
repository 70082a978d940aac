"""Half-precision weights computed in float32 on a CPU, where MLX's half kernels are slow.

MLX's CPU backend has no fast path for float16 or bfloat16: on 2 AVX2 cores a [1, 576] x
[576, 1536] matmul takes 4.4 ms in float16 and 1.2 ms in bfloat16 against 0.19 ms in
float32, and a 4-bit quantized one, whose activations take the scales' dtype, 28 ms
(float16 scales) or 9.3 ms (bfloat16) against 0.79 ms (float32). A whole SmolLM2 decode
step: bfloat16 weights 140 -> 64.5 ms a token, 4-bit weights with float16 scales
4,173 -> 137 ms (benchmarks/cpu_float32.py). Most models on a hub are bfloat16 or 4-bit
with half-precision scales, so on a CPU their half-precision parameters are cast to
float32 at load (`engine.cpu_float32`): the matmuls, the activations and the KV cache
then run in float32, the quantized weights stay packed. The cost is memory: twice the
bytes of every cast parameter (for a 4-bit model only its scales, biases, norms and any
unquantized layer), which `auto` allows while the model then takes at most a quarter of
the machine's RAM (memory.py), and which the pool's estimate before a load already counts
(pool/memory_budget.py reads the half-precision bytes from the safetensors headers).
"""

from __future__ import annotations

import logging
from typing import Any, Literal

import mlx.core as mx
from mlx.utils import tree_flatten, tree_unflatten

from omlx.platform.memory import float32_fits

log = logging.getLogger(__name__)

HALF_TYPES = (mx.float16, mx.bfloat16)


def _own_half_arrays(module: Any) -> dict[str, mx.array]:
    """The module's own half-precision parameters (not its children's, nor private keys)."""
    return {
        k: v
        for k, v in module.items()
        if isinstance(v, mx.array) and v.dtype in HALF_TYPES and not k.startswith("_")
    }


def upcast_cost(model: Any) -> tuple[int, int]:
    """(bytes of the model's parameters now, bytes that casting to float32 adds)."""
    total = added = 0
    for _, value in tree_flatten(model.parameters()):
        total += value.nbytes
        if value.dtype in HALF_TYPES:
            added += value.nbytes  # float32 takes twice a half-precision value's bytes
    return total, added


def upcast_half_parameters(model: Any) -> int:
    """Cast every float16/bfloat16 parameter of `model` to float32; the bytes added.

    Module by module, each cast evaluated before the next, so the old arrays are freed
    as the new ones arrive and the model is never held twice.
    """
    added = 0
    for _, module in model.named_modules():
        half = _own_half_arrays(module)
        if not half:
            continue
        cast = {k: v.astype(mx.float32) for k, v in half.items()}
        mx.eval(list(cast.values()))
        module.update(cast)
        added += sum(v.nbytes for v in half.values())
    # Parameters a module keeps in a list or dict of arrays, which the pass above skips.
    rest = [(k, v) for k, v in tree_flatten(model.parameters()) if v.dtype in HALF_TYPES]
    if rest:
        model.update(tree_unflatten([(k, v.astype(mx.float32)) for k, v in rest]))
        mx.eval(model.parameters())
        added += sum(v.nbytes for _, v in rest)
    return added


def wants_float32(
    setting: Literal["auto", "off", "on"],
    model: Any,
    *,
    device: mx.Device | None = None,
    ram_bytes: int | None = None,
) -> bool:
    """Whether `model`'s half-precision parameters should be cast on this device: never
    off a CPU or with nothing to cast; `on` always; `auto` while the cast model takes at
    most AUTO_FLOAT32_SHARE of the machine's RAM."""
    if setting == "off" or (device or mx.default_device()).type != mx.cpu:
        return False
    total, added = upcast_cost(model)
    if not added:
        return False
    if setting == "on":
        return True
    return float32_fits(total, added, ram_bytes)


def compute_in_float32(model: Any, setting: Literal["auto", "off", "on"], name: str) -> int:
    """What every loader calls once its model is loaded: cast if `setting` says so here;
    the bytes added (0: left as it is)."""
    if not wants_float32(setting, model):
        return 0
    added = upcast_half_parameters(model)
    log.info("model %s: computing in float32 on the CPU (+%.1f MB)", name, added / 1e6)
    return added
