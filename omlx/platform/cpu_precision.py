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
(pool/weight_headers.py reads what the loader will do from the safetensors headers).

MLX's CPU kernels for quantized matmuls are slower still than a float32 matmul of the
whole weight (SmolLM2's MLP shape, float32 activations: 0.79 against 0.19 ms for one
row, 13 against 0.28 ms for sixteen, which is what prefill runs), so a quantized model
whose float32 form fits the same share of the RAM is also dequantized: its quantized
linears and embeddings become float32 ones holding the same values (SmolLM2 kept 4-bit,
over HTTP: 3,902 -> 61 ms a token, as fast as its float32 import).
"""

from __future__ import annotations

import logging
from typing import Any, Literal

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten, tree_unflatten

from omlx.platform.memory import float32_fits
from omlx.platform.weight_layout import submodule

log = logging.getLogger(__name__)

HALF_TYPES = (mx.float16, mx.bfloat16)


def _own_half_arrays(module: Any) -> dict[str, mx.array]:
    """The module's own half-precision parameters (not its children's, nor private keys)."""
    return {
        k: v
        for k, v in module.items()
        if isinstance(v, mx.array) and v.dtype in HALF_TYPES and not k.startswith("_")
    }


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


def float32_bytes(model: Any, *, dequantize: bool) -> int:
    """The model's parameter bytes once cast to float32 (and dequantized, if asked)."""
    total = 0
    quantized = _quantized_modules(model) if dequantize else {}
    for name, value in tree_flatten(model.parameters()):
        module = name.rsplit(".", 1)[0]
        leaf = name.rsplit(".", 1)[-1]
        if module in quantized and leaf in ("weight", "scales", "biases"):
            if leaf == "weight":  # packed: 32 / bits values per uint32, 4 bytes each
                total += value.size * 32 * 4 // quantized[module].bits
            continue  # scales and biases vanish (a layer's own `bias` stays)
        total += value.size * 4 if value.dtype in HALF_TYPES else value.nbytes
    return total


def _quantized_modules(model: Any) -> dict[str, Any]:
    return {
        name: m
        for name, m in model.named_modules()
        if type(m) in (nn.QuantizedLinear, nn.QuantizedEmbedding)
    }


def float32_plan(
    setting: Literal["auto", "off", "on"],
    model: Any,
    *,
    device: mx.Device | None = None,
    ram_bytes: int | None = None,
) -> tuple[bool, bool]:
    """(cast, dequantize) for `model` on this device: nothing off a CPU; `on` always
    casts; `auto` casts while the cast model takes at most AUTO_FLOAT32_SHARE of the RAM;
    quantized linears and embeddings are dequantized (either setting) while the whole
    float32 model does."""
    if setting == "off" or (device or mx.default_device()).type != mx.cpu:
        return False, False
    has_half = any(v.dtype in HALF_TYPES for _, v in tree_flatten(model.parameters()))
    dequantize = bool(_quantized_modules(model)) and float32_fits(
        float32_bytes(model, dequantize=True), ram_bytes
    )
    cast = has_half and (
        setting == "on"
        or dequantize
        or float32_fits(float32_bytes(model, dequantize=False), ram_bytes)
    )
    return cast, dequantize


def dequantize_layers(model: Any) -> int:
    """Replace every quantized linear and embedding by a float32 one with the same values,
    layer by layer; how many were replaced."""
    names = list(_quantized_modules(model))
    for name in names:  # by name: holding the modules would keep every old array alive
        old = submodule(model, name)
        dense = mx.dequantize(
            old.weight,
            old.scales,
            old.get("biases"),
            group_size=old.group_size,
            bits=old.bits,
            mode=getattr(old, "mode", "affine"),
        ).astype(mx.float32)
        if isinstance(old, nn.QuantizedEmbedding):
            new: nn.Module = nn.Embedding(1, 1)
        else:
            new = nn.Linear(1, 1, bias="bias" in old)
            if "bias" in old:
                new.bias = old.bias.astype(mx.float32)
        new.weight = dense
        mx.eval(new.parameters())
        model.update_modules(tree_unflatten([(name, new)]))
    return len(names)


def compute_in_float32(model: Any, setting: Literal["auto", "off", "on"], name: str) -> int:
    """What every loader calls once its model is loaded: cast and dequantize as `setting`
    says for this device; the bytes the parameters grew by (0: left as they are)."""
    cast, dequantize = float32_plan(setting, model)
    if not (cast or dequantize):
        return 0
    before = sum(v.nbytes for _, v in tree_flatten(model.parameters()))
    if cast:  # first: dequantizing float32 scales and biases is exact
        upcast_half_parameters(model)
    if dequantize:
        dequantize_layers(model)
    added = sum(v.nbytes for _, v in tree_flatten(model.parameters())) - before
    log.info(
        "model %s: computing in float32 on the CPU%s (%+.1f MB)",
        name, ", dequantized" if dequantize else "", added / 1e6,
    )  # fmt: skip
    return added
