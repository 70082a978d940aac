"""The model pool and KV cache `omlx serve` runs, built the same way in or out of process."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from omlx.settings import Settings

log = logging.getLogger(__name__)


def build_pool(settings: Settings, default: str, default_path: Path) -> tuple[Any, Any]:
    """(LocalModelPool, PrefixCache or None) serving `default` from `default_path`.

    `default_path` may lie outside the store (a folder given by path)."""
    from omlx.models.store import ModelStore
    from omlx.platform.blas import blas_description
    from omlx.pool.pool import LocalModelPool

    log.info("MLX BLAS: %s", blas_description())
    kv_cache = prefix_cache(settings)
    pool = LocalModelPool(
        settings,
        store=ModelStore.from_settings(settings.models),
        default_model=default,
        alt_paths=dflash_paths(settings, default),
        models={default: default_path},
        prefix_factory=kv_cache.factory() if kv_cache else None,
        cache_stats=kv_cache.stats if kv_cache else None,
    )
    return pool, kv_cache


def dflash_paths(settings: Settings, default: str) -> dict[str, Any]:
    """The DFlash alternative path for `draft.model` (default: the default model)."""
    if not settings.draft.path:
        return {}
    from omlx.draft.serving import DFlashPath

    model = settings.draft.model or default
    log.info("DFlash: %s served with draft %s", model, settings.draft.path)
    return {model: DFlashPath.from_settings(settings.draft)}


def prefix_cache(settings: Settings) -> Any:
    """The tiered KV cache shared by every model, or None when it is switched off."""
    if not settings.cache.enabled:
        return None
    from omlx.cache.prefix_cache import PrefixCache

    return PrefixCache(settings.cache)
