"""Matmuls of a few rows as one batched matrix-vector product, on CUDA.

MLX's CUDA backend runs a one-row matmul with its own gemv kernel, a plain node of the
step's CUDA graph, and every matmul of more rows as a cuBLASLt call that it records by
stream capture into a child graph: a host cost of tens of microseconds per matmul, which
bounds the step of a small model (a 16-token DFlash verify of SmolLM2 costs two plain
steps, almost all of it host time). A linear layer here computes its 2..`max_rows` rows
as that many vectors instead: the input is viewed as (rows, 1, in) with both inner
strides 1, which MLX reads as transposed vectors and so does not fold back into one
matrix of `rows` rows, against the weight broadcast over them: one batched gemv kernel.
Each vector reads the whole weight, so this pays only where the weight stays in the
GPU's L2 cache between them (`max_weight_bytes`): small models, not an 8B's matrices.
Above `max_rows`, and on one row, the layer is nn.Linear as it was.
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_unflatten

from omlx.mlx_lm_compat.row_attention import ROW_ATTENTION_FLAG, use_row_attention
from omlx.platform.weight_layout import submodule

# A DFlash block (16) and small decode batches: measured up to 16 rows (row_gemv_probe);
# each row reads the weight again, so many rows would trade the capture for L2 traffic.
DEFAULT_MAX_ROWS = 16
# Below the L2 cache of an H100 / H200 (50 MB) with room for the activations.
DEFAULT_MAX_WEIGHT_BYTES = 24 << 20
HEAD = "lm_head"  # mlx-lm's name for an untied output projection
# Keep each weight's views and share an input's (below); False builds them in every call,
# as before, for a same-machine comparison (benchmarks/dflash_trained.py --fresh-views).
KEEP_VIEWS = True
_CHOSEN = "_omlx_row_gemv"


class RowGemvLinear(nn.Linear):
    """nn.Linear (same parameters) whose matmuls of 2..max_rows rows are a batched gemv."""

    def __init__(self, linear: nn.Linear, max_rows: int = DEFAULT_MAX_ROWS) -> None:
        nn.Module.__init__(self)
        self.weight = linear.weight
        if "bias" in linear:
            self.bias = linear.bias
        self.max_rows = max_rows
        # Outside nn.Module's own dict: not a parameter (see _weight_views).
        object.__setattr__(self, "_views", None)

    def _extra_repr(self) -> str:
        return f"{super()._extra_repr()}, max_rows={self.max_rows}"

    def _weight_views(self) -> tuple[mx.array, dict[int, mx.array]]:
        """The weight transposed, and that broadcast over each number of vectors: made
        once per weight array and evaluated with the first pass that uses them, so later
        graphs take them as leaves instead of three view nodes in every call (transpose,
        expand, and the matmul's own broadcast; on a host-bound GPU each node costs host
        time, and a 16-row SmolLM2 pass has 210 linears). A new weight array (loaded,
        updated) makes new views."""
        weight = self["weight"]
        views = self._views
        if views is None or views[0] is not weight or not KEEP_VIEWS:
            views = (weight, weight.T, {})
            object.__setattr__(self, "_views", views)
        return views[1], views[2]

    def __call__(self, x: mx.array) -> mx.array:
        # The one-row decode step passes here hundreds of times a step on a host-bound
        # GPU: nn.Linear's own work, inlined, on the kept transposed view, and nothing
        # else on that path.
        transposed, broadcasts = self._weight_views()
        rows = x.size // x.shape[-1]
        if rows <= 1 or rows > self.max_rows:  # 0 rows: an empty input, as nn.Linear
            if "bias" in self:
                return mx.addmm(self["bias"], x, transposed)
            return x @ transposed
        broadcast = broadcasts.get(rows)
        if broadcast is None:  # a view: stride 0 over the vectors, no copy
            broadcast = broadcasts[rows] = mx.broadcast_to(
                transposed[None], (rows, *transposed.shape)
            )
        y = mx.matmul(_vectors(x, rows), broadcast).reshape(*x.shape[:-1], -1)
        if "bias" in self:
            y = y + self["bias"]
        return y


# The last input viewed as vectors: q/k/v and gate/up projections take the same array,
# so the later ones reuse its view (two graph nodes fewer each). Held by reference, so
# the identity test cannot match a new array at a freed one's address.
_last_vectors: tuple[mx.array, mx.array] | None = None


def _vectors(x: mx.array, rows: int) -> mx.array:
    """`x` as `rows` vectors of strides (in, 1, 1), which MLX does not fold back into
    one matrix (a cuBLASLt call on CUDA) but runs as one batched gemv."""
    global _last_vectors
    last = _last_vectors  # one read: another engine thread may replace it
    if last is not None and last[0] is x and KEEP_VIEWS:
        return last[1]
    vectors = mx.swapaxes(x.reshape(rows, -1, 1), 1, 2)
    _last_vectors = (x, vectors)
    return vectors


def use_row_gemv(
    model: Any,
    max_rows: int = DEFAULT_MAX_ROWS,
    max_weight_bytes: int = DEFAULT_MAX_WEIGHT_BYTES,
    *,
    all_or_none: bool = False,
    attention: bool = True,
) -> int:
    """Swap every plain nn.Linear of `model` whose weight fits `max_weight_bytes` for a
    RowGemvLinear sharing its arrays; how many were swapped. Quantized layers (MLX's own
    kernels already) and other subclasses are left as they are. `all_or_none`: swap
    nothing unless every plain linear fits (engine.row_gemv auto: measured on small
    models, where they all do), the output head aside: an untied head is as large as the
    embedding in any model, one matmul a pass, and stays as it is when it does not fit.
    `attention`: the model's few-query attention becomes batched gemvs too
    (row_attention.py), whether or not any linear was swapped (a quantized model has
    none to swap, but its attention is a float one)."""
    linears = [(n, m) for n, m in model.named_modules() if type(m) is nn.Linear]
    names = [n for n, m in linears if m.weight.nbytes <= max_weight_bytes]
    too_large = {n for n, _ in linears} - set(names)
    if all_or_none and any(n.rpartition(".")[2] != HEAD for n in too_large):
        return 0
    for name in names:
        swapped = RowGemvLinear(submodule(model, name), max_rows)
        model.update_modules(tree_unflatten([(name, swapped)]))
    if attention:
        use_row_attention(model)
        for _, module in model.named_modules():
            if hasattr(module, ROW_ATTENTION_FLAG):  # modules with their own attention
                setattr(module, ROW_ATTENTION_FLAG, True)
    object.__setattr__(model, _CHOSEN, True)
    return len(names)


def uses_row_gemv(model: Any) -> bool:
    """Whether `use_row_gemv` chose `model` (a DFlash draft then follows its target)."""
    return getattr(model, _CHOSEN, False) or any(
        isinstance(m, RowGemvLinear) for _, m in model.named_modules()
    )


__all__ = ["DEFAULT_MAX_ROWS", "RowGemvLinear", "use_row_gemv", "uses_row_gemv"]
