"""Start a draft from the target's own last layers instead of random weights.

The draft's layers have the target's width, and their output goes through the target's
final norm and LM head; the target's last layers already map late hidden states to what
that head reads. Copying them (attention and MLP projections, the two norms of each
layer, the final norm) gives training a start that speaks the head's language; the
draft's own parts (`fc`, `hidden_norm`, the per-head q/k norms the target may not have)
start as before. A layer whose shapes differ from the target's is left random.
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx
import mlx.nn as nn

from omlx.draft.model import DFlashDraftModel

# The draft layer's parameters that a (Llama/Qwen-style) target layer has under the same name.
LAYER_PARTS = (
    "self_attn.q_proj",
    "self_attn.k_proj",
    "self_attn.v_proj",
    "self_attn.o_proj",
    "mlp.gate_proj",
    "mlp.up_proj",
    "mlp.down_proj",
    "input_layernorm",
    "post_attention_layernorm",
)


def init_from_target(draft: DFlashDraftModel, target_layers: list[Any], final_norm: Any) -> int:
    """Copy the target's last layers into `draft`'s last ones (one for one, as many as
    both have) and its final norm; how many tensors were copied."""
    k = min(len(draft.layers), len(target_layers))
    copied = 0
    for layer, source in zip(draft.layers[-k:], target_layers[-k:], strict=True):
        for path in LAYER_PARTS:
            copied += _copy(_get(layer, path), _get(source, path))
    copied += _copy(draft.norm, final_norm)
    mx.eval(draft.parameters())
    return copied


def _get(module: Any, path: str) -> Any:
    for part in path.split("."):
        module = getattr(module, part, None)
        if module is None:
            return None
    return module


def _copy(dest: Any, source: Any) -> int:
    if dest is None or source is None:
        return 0
    copied = 0
    for name in ("weight", "bias"):
        if name not in dest:
            continue
        value = dense_weight(source) if name == "weight" else source.get(name)
        if value is None or value.shape != dest[name].shape:
            continue
        dest[name] = value.astype(dest[name].dtype)
        copied += 1
    return copied


def dense_weight(module: Any) -> mx.array | None:
    """A layer's weight as (output, input) floats: quantized ones dequantized, and layouts
    that store it otherwise read through their `weight`."""
    if isinstance(module, nn.QuantizedLinear):
        return mx.dequantize(
            module.weight,
            module.scales,
            module.get("biases"),
            group_size=module.group_size,
            bits=module.bits,
            mode=module.mode,
        )
    weight = getattr(module, "weight", None)
    return weight if isinstance(weight, mx.array) else None
