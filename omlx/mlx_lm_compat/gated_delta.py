"""Qwen3.5's GatedDeltaNet pieces, for DFlash tape replay of its recurrence.

omlx's tape recorder mirrors `GatedDeltaNet.__call__` (its projections, conv and norm are
the layer's own modules) and replays committed steps through `recurrence`, which picks
the Metal kernel or the ops path exactly as mlx-lm's `gated_delta_update` does, so a
replayed state equals the verify pass's state bit for bit.
"""

from __future__ import annotations

import mlx.core as mx
from mlx_lm.models.gated_delta import (
    compute_g,
    gated_delta_kernel,
    gated_delta_ops,
    normalize_qk,
)
from mlx_lm.models.qwen3_5 import GatedDeltaNet


def recurrence(
    q: mx.array, k: mx.array, v: mx.array, g: mx.array, beta: mx.array, state: mx.array
) -> tuple[mx.array, mx.array]:
    """The gated delta rule, dispatched as mlx-lm's `gated_delta_update` dispatches it."""
    dk = k.shape[-1]
    if mx.default_device() == mx.gpu and mx.metal.is_available() and dk >= 32 and dk % 32 == 0:
        return gated_delta_kernel(q, k, v, g, beta, state)
    return gated_delta_ops(q, k, v, g, beta, state)


__all__ = ["GatedDeltaNet", "compute_g", "normalize_qk", "recurrence"]
