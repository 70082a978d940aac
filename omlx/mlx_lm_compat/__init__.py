"""The one seam between omlx and mlx-lm.

Every omlx module that needs mlx-lm imports it from here (an import-linter contract
holds this), so an mlx-lm upgrade is checked in one place. Most names are mlx-lm's
public API re-exported as is; the modules below hold what leans on its internals:

- `batch_join`: BatchGenerator subclasses whose prefilled rows join the running batch
  without a forward pass of their own (private fields of GenerationBatch).
- `cache_internals`: reading and restoring RotatingKVCache's ring buffer (`_idx`,
  `_temporal_order`) for the block cache.
- `gated_delta`: the GatedDeltaNet recurrence, dispatched as mlx-lm dispatches it, and the
  layer's projections, for DFlash tape replay.
- `decoder`: where a loaded mlx-lm model keeps its decoder layers, embedding and LM head
  (DFlash swaps layer-list entries for capture proxies during its own forward passes).

Checked against the mlx-lm versions in CHECKED_VERSIONS (the `mlx_lm_diff` tests: run
`pytest -m mlx_lm_diff` after installing another mlx-lm; see README). pyproject.toml's
dependency range is the same set.
"""

from __future__ import annotations

import logging
from importlib import metadata

from mlx_lm import load
from mlx_lm.generate import BatchGenerator, StopSequences, generate_step
from mlx_lm.models.activations import swiglu
from mlx_lm.models.cache import (
    ArraysCache,
    BatchKVCache,
    KVCache,
    QuantizedKVCache,
    RotatingKVCache,
    make_prompt_cache,
)
from mlx_lm.models.rope_utils import initialize_rope
from mlx_lm.sample_utils import apply_min_p, apply_top_k, apply_top_p

CHECKED_VERSIONS = ("0.32.2",)

log = logging.getLogger(__name__)
_warned = False


def installed_version() -> str:
    return metadata.version("mlx-lm")


def warn_if_unchecked() -> None:
    """Log once when the installed mlx-lm is not one this seam was checked against."""
    global _warned
    version = installed_version()
    if version not in CHECKED_VERSIONS and not _warned:
        _warned = True
        log.warning(
            "mlx-lm %s is not among the versions omlx was checked against (%s); "
            "run the mlx_lm_diff tests before relying on it",
            version,
            ", ".join(CHECKED_VERSIONS),
        )


__all__ = [
    "CHECKED_VERSIONS",
    "ArraysCache",
    "BatchGenerator",
    "BatchKVCache",
    "KVCache",
    "QuantizedKVCache",
    "RotatingKVCache",
    "StopSequences",
    "apply_min_p",
    "apply_top_k",
    "apply_top_p",
    "generate_step",
    "initialize_rope",
    "installed_version",
    "load",
    "make_prompt_cache",
    "swiglu",
    "warn_if_unchecked",
]
