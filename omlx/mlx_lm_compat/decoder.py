"""Where a loaded mlx-lm model keeps its decoder stack (llama, qwen2/3, qwen3_5 alike)."""

from __future__ import annotations

from typing import Any


def decoder_stack(model: Any) -> Any | None:
    """The inner decoder (`model.model`, with a `layers` list), or None if it has none."""
    inner = getattr(model, "model", None)
    if inner is None or not isinstance(getattr(inner, "layers", None), list):
        return None
    return inner
