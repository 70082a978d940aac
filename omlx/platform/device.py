"""Which kind of device MLX computes on (settings with an `auto` value resolve by it)."""

from __future__ import annotations


def on_gpu() -> bool:
    """True when MLX's default device is a GPU (Metal or CUDA)."""
    import mlx.core as mx

    return mx.default_device().type == mx.DeviceType.gpu


__all__ = ["on_gpu"]
