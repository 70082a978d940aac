"""Projections of one input computed as one matmul: q/k/v of attention, gate/up of the MLP.

mlx-lm's models call `q_proj(x)`, `k_proj(x)`, `v_proj(x)` (and `gate_proj(x)`,
`up_proj(x)`) on the same array, one matmul each. On CUDA every matmul is a cuBLAS call
whose descriptors and heuristic MLX rebuilds on the host each time, and a decode step of
a 36-layer model is bound by that host work, not by the GPU. Here the weights of the
sibling projections are concatenated into one linear layer, computed once on the first
call, and each projection returns its slice: three matmuls become one in attention, two
one in the MLP, the same numbers up to the BLAS's summation order.

The models are left as they are written: the projections stay where the model's own code
calls them, as parameter-less parts of the fused layer.
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx
import mlx.nn as nn

# (module attribute names sharing an input), per block kind
GROUPS = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))


class _Memo:
    """The last input and its split outputs, kept outside the module tree (an array in
    a Module's attributes would count as one of its parameters)."""

    __slots__ = ("input", "left", "outputs")

    def __init__(self) -> None:
        self.input: mx.array | None = None
        self.outputs: list[mx.array] = []
        self.left = 0


class FusedProjections(nn.Module):
    """One linear layer (`linear`: nn.Linear or nn.QuantizedLinear) for several sibling
    projections; `output(x, i)` is the i-th one's result."""

    def __init__(self, linear: nn.Module, out_dims: list[int]) -> None:
        super().__init__()
        self.linear = linear
        self.splits = tuple(int(s) for s in _cumsum(out_dims)[:-1])
        self._count = len(out_dims)
        self._memo = _Memo()

    def output(self, x: mx.array, index: int) -> mx.array:
        memo = self._memo
        if memo.input is not x:
            memo.outputs = mx.split(self.linear(x), list(self.splits), axis=-1)
            memo.input, memo.left = x, self._count
        out = memo.outputs[index]
        memo.left -= 1
        if memo.left == 0:  # every part taken: hold no activations between calls
            memo.input, memo.outputs = None, []
        return out


class _Owner:
    """A reference the module tree does not follow (the fused layer is its parent's)."""

    __slots__ = ("fused",)

    def __init__(self, fused: FusedProjections) -> None:
        self.fused = fused


class ProjectionPart(nn.Module):
    """Stands where one of the fused projections was; no parameters of its own."""

    def __init__(self, fused: FusedProjections, index: int, out_dims: int):
        super().__init__()
        self._owner = _Owner(fused)
        self.index = index
        self.out_dims = out_dims

    @property
    def weight(self) -> mx.array:
        """This projection's rows of the fused weight (what readers of a Linear expect)."""
        fused = self._owner.fused
        start = ([0, *fused.splits])[self.index]
        return fused.linear.weight[start : start + self.out_dims]

    def __call__(self, x: mx.array) -> mx.array:
        return self._owner.fused.output(x, self.index)


def fuse_projections(model: Any) -> int:
    """Fuse every group of sibling projections in `model` that can be; how many groups.

    A group is fused when all its members are plain nn.Linear (float) or all
    nn.QuantizedLinear of one group size, bits and mode, with one input size and bias on
    all or none. The old weights are freed group by group.
    """
    groups = []
    for _, module in model.named_modules():
        for names in GROUPS:
            parts = [module.get(n) for n in names]
            if all(_fusable(p) for p in parts) and _compatible(parts):
                groups.append((module, names))
    for module, names in groups:  # after the walk: fusing changes the tree it walks
        _fuse(module, names, [module[n] for n in names])
    return len(groups)


def _fusable(module: Any) -> bool:
    return type(module) in (nn.Linear, nn.QuantizedLinear)


def _compatible(parts: list[Any]) -> bool:
    first = parts[0]
    kind = type(first)
    if any(type(p) is not kind for p in parts):
        return False
    if len({"bias" in p for p in parts}) != 1:
        return False
    if kind is nn.QuantizedLinear:
        keys = {(p.group_size, p.bits, p.mode, "biases" in p) for p in parts}
        if len(keys) != 1 or len({p.weight.shape[1] for p in parts}) != 1:
            return False
        return len({p.scales.dtype for p in parts}) == 1
    return len({(p.weight.shape[1], p.weight.dtype) for p in parts}) == 1


def _fuse(module: Any, names: tuple[str, ...], parts: list[Any]) -> None:
    out_dims = [int(p.weight.shape[0]) for p in parts]
    linear = _concatenated(parts)
    mx.eval(linear.parameters())
    fused = FusedProjections(linear, out_dims)
    setattr(module, "fused_" + "_".join(n.removesuffix("_proj") for n in names), fused)
    for i, name in enumerate(names):
        setattr(module, name, ProjectionPart(fused, i, out_dims[i]))


def _concatenated(parts: list[Any]) -> nn.Module:
    first = parts[0]
    has_bias = "bias" in first
    if type(first) is nn.QuantizedLinear:
        out_dims = sum(int(p.weight.shape[0]) for p in parts)
        layer = nn.QuantizedLinear(
            _input_dims(first), out_dims, has_bias, first.group_size, first.bits, first.mode
        )
        layer.weight = mx.concatenate([p.weight for p in parts])
        layer.scales = mx.concatenate([p.scales for p in parts])
        if "biases" in first:
            layer.biases = mx.concatenate([p.biases for p in parts])
        else:
            layer.pop("biases", None)
        if has_bias:
            layer.bias = mx.concatenate([p.bias for p in parts])
        return layer
    weight = mx.concatenate([p.weight for p in parts])
    layer = nn.Linear(int(weight.shape[1]), int(weight.shape[0]), bias=has_bias)
    layer.weight = weight
    if has_bias:
        layer.bias = mx.concatenate([p.bias for p in parts])
    return layer


def _input_dims(linear: Any) -> int:
    if type(linear) is nn.QuantizedLinear:
        return int(linear.weight.shape[1]) * 32 // linear.bits
    return int(linear.weight.shape[1])


def _cumsum(values: list[int]) -> list[int]:
    out, total = [], 0
    for v in values:
        total += v
        out.append(total)
    return out


__all__ = ["FusedProjections", "ProjectionPart", "fuse_projections"]
