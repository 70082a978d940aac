"""Linear weights stored input-major on the CPU, where OpenBLAS reads them faster.

nn.Linear keeps its weight as (output, input) and computes x @ W.T. For the few rows of
a decode step OpenBLAS's sgemm reads weights well below the machine's memory bandwidth,
and faster in the (input, output) layout multiplied without a transpose: 30 matvecs of
SmolLM2's MLP shape on 2 AVX2 cores went from 5-9 to 7-12 GB/s. A whole decode step
gains less, since other ops and the tied lm_head (an embedding, left as it is) share the
time: 1.02-1.10x at batch 1-8 and 1.14x at 16, prefill within noise, logits bit-identical
(benchmarks/weight_layout_bench.py, weight_layout.jsonl). On a GPU the vendor BLAS
handles either layout alike, so the swap is CPU-only.
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_unflatten

# float32 only: half-precision matmuls do not go through BLAS on a CPU, and in the swapped
# layout they ran 0.84-1.04x (bfloat16 matvecs of SmolLM2's shapes 0.84-0.93x).
# Half-precision models are computed in float32 anyway (cpu_precision.py) unless that
# is turned off.
SWAPPED_TYPES = (mx.float32,)


class InputMajorLinear(nn.Module):
    """nn.Linear with its weight stored transposed, (input_dims, output_dims), contiguous."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.weight_t = mx.contiguous(linear.weight.T)
        if "bias" in linear:
            self.bias = linear.bias

    @property
    def weight(self) -> mx.array:
        """The (output, input) view nn.Linear users read (shape, dtype, a matmul)."""
        return self.weight_t.T

    def __call__(self, x: mx.array) -> mx.array:
        if "bias" in self:
            return mx.addmm(self.bias, x, self.weight_t)
        return x @ self.weight_t


def use_input_major_linears(model: Any) -> int:
    """Swap every float32 nn.Linear of `model` for an InputMajorLinear; how many were swapped.

    Quantized layers (their own type) and subclasses of nn.Linear are left as they are.
    The old weights are freed as the new ones are evaluated, one layer at a time, so the
    swap never holds two copies of the model.
    """
    names = [
        name
        for name, module in model.named_modules()
        if type(module) is nn.Linear and module.weight.dtype in SWAPPED_TYPES
    ]
    for name in names:  # by name: a list of the modules would keep every old weight alive
        new = InputMajorLinear(submodule(model, name))
        mx.eval(new.parameters())
        model.update_modules(tree_unflatten([(name, new)]))
    return len(names)


def submodule(model: Any, name: str) -> Any:
    """The module at a dotted path of `named_modules()` (list items by index)."""
    node = model
    for part in name.split("."):
        node = node[int(part)] if isinstance(node, list) else node[part]
    return node


def wants_input_major(device: mx.Device | None = None) -> bool:
    """Whether linears should be swapped on this device (the CPU only)."""
    return (device or mx.default_device()).type == mx.cpu


__all__ = ["InputMajorLinear", "submodule", "use_input_major_linears", "wants_input_major"]
