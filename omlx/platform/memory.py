"""The machine's memory, and the share of it a model cast to float32 may take (no MLX)."""

from __future__ import annotations

import os

# engine.cpu_float32 = "auto" casts a half-precision model on a CPU while the cast model
# takes at most this share of the RAM (cpu_precision.py).
AUTO_FLOAT32_SHARE = 0.25


def system_memory_bytes() -> int:
    """Physical RAM (Linux and macOS); unified memory on Apple Silicon."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 16 * 1024**3  # an unknown platform: assume a modest machine


def float32_fits(float32_bytes: int, ram_bytes: int | None = None) -> bool:
    """Whether a model that takes `float32_bytes` once cast (or dequantized) may be."""
    ram = system_memory_bytes() if ram_bytes is None else ram_bytes
    return float32_bytes <= AUTO_FLOAT32_SHARE * ram
