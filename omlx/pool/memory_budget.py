"""How much memory a model will take before it loads, and the pool's budget (no MLX)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

from omlx.models.types import weight_files
from omlx.platform.memory import float32_fits
from omlx.pool.policy import parse_memory_budget, system_memory_bytes
from omlx.settings import ModelSettings

HALF_DTYPES = frozenset({"F16", "BF16"})  # safetensors' names

# Weights are most of a model's memory; activations and the MLX allocator's rounding add
# a little. The KV cache grows with use and is bounded by the cache settings, not here.
LOAD_OVERHEAD = 1.05


def estimate_model_bytes(path: Path, *, cpu_float32: str = "off") -> int:
    """Weight file bytes (safetensors load as-is, so file size ~ memory) plus overhead.

    `cpu_float32`: engine.cpu_float32 where the model will compute on a CPU ("off"
    elsewhere): half-precision tensors the loader will cast count twice."""
    try:
        files = weight_files(path)
        size = sum(f.stat().st_size for f in files)
        half = half_precision_bytes(files) if cpu_float32 != "off" else 0
    except OSError:
        return 0
    if half and (cpu_float32 == "on" or float32_fits(size, half)):
        size += half
    return int(size * LOAD_OVERHEAD)


def half_precision_bytes(files: list[Path]) -> int:
    """Bytes of float16/bfloat16 tensors in safetensors files, from their headers only."""
    total = 0
    for f in files:
        if f.suffix != ".safetensors":
            continue
        with f.open("rb") as fh:
            try:
                (length,) = struct.unpack("<Q", fh.read(8))
                if length > f.stat().st_size:
                    continue  # not a safetensors file: the loader will say so
                header = json.loads(fh.read(length))
            except (struct.error, ValueError):
                continue
        for name, entry in header.items():
            if name != "__metadata__" and entry.get("dtype") in HALF_DTYPES:
                begin, end = entry["data_offsets"]
                total += end - begin
    return total


def budget_bytes(models: ModelSettings, total_bytes: int | None = None) -> int:
    """`models.memory_budget` in bytes (a size, or a share of physical RAM)."""
    total = total_bytes if total_bytes is not None else system_memory_bytes()
    return parse_memory_budget(models.memory_budget, total)
