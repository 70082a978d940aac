"""Which kind of device MLX computes on (settings with an `auto` value resolve by it)."""

from __future__ import annotations


def on_gpu() -> bool:
    """True when MLX's default device is a GPU (Metal or CUDA)."""
    import mlx.core as mx

    return mx.default_device().type == mx.DeviceType.gpu


def on_cuda() -> bool:
    """True when MLX computes on an NVIDIA GPU: its own memory behind PCIe, and decode
    steps bound by kernel launches rather than by the GPU (unlike Apple silicon)."""
    import mlx.core as mx

    return on_gpu() and not mx.metal.is_available()


__all__ = ["on_cuda", "on_gpu"]
