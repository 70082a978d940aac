"""How much memory a model will take before it loads, and the pool's budget (no MLX)."""

from __future__ import annotations

from pathlib import Path

from omlx.models.types import weight_files
from omlx.platform.memory import system_memory_bytes
from omlx.pool.policy import parse_memory_budget
from omlx.pool.weight_headers import planned_bytes
from omlx.settings import ModelSettings

# Weights are most of a model's memory; activations and the MLX allocator's rounding add
# a little. The KV cache grows with use and is bounded by the cache settings, not here.
LOAD_OVERHEAD = 1.05


def estimate_model_bytes(path: Path, *, cpu_float32: str = "off") -> int:
    """Weight file bytes (safetensors load as-is, so file size ~ memory) plus overhead.

    `cpu_float32`: engine.cpu_float32 where the model will compute on a CPU ("off"
    elsewhere): what the loader will cast or dequantize counts at its float32 size."""
    try:
        files = weight_files(path)
        size = planned_bytes(path, files, sum(f.stat().st_size for f in files), cpu_float32)
    except OSError:
        return 0
    return int(size * LOAD_OVERHEAD)


def budget_bytes(models: ModelSettings, total_bytes: int | None = None) -> int:
    """`models.memory_budget` in bytes (a size, or a share of physical RAM)."""
    total = total_bytes if total_bytes is not None else system_memory_bytes()
    return parse_memory_budget(models.memory_budget, total)
