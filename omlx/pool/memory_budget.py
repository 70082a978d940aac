"""How much memory a model will take before it loads, and the pool's budget (no MLX)."""

from __future__ import annotations

from pathlib import Path

from omlx.models.types import weight_files
from omlx.pool.policy import parse_memory_budget, system_memory_bytes
from omlx.settings import ModelSettings

# Weights are most of a model's memory; activations and the MLX allocator's rounding add
# a little. The KV cache grows with use and is bounded by the cache settings, not here.
LOAD_OVERHEAD = 1.05


def estimate_model_bytes(path: Path) -> int:
    """Weight file bytes (safetensors load as-is, so file size ~ memory) plus overhead."""
    try:
        files = weight_files(path)
    except OSError:
        return 0
    return int(sum(f.stat().st_size for f in files) * LOAD_OVERHEAD)


def budget_bytes(models: ModelSettings, total_bytes: int | None = None) -> int:
    """`models.memory_budget` in bytes (a size, or a share of physical RAM)."""
    total = total_bytes if total_bytes is not None else system_memory_bytes()
    return parse_memory_budget(models.memory_budget, total)
