"""Load the default model at start (`engine.preload`), in the background: /health answers
at once, /ready once the model is loaded. A failed preload is logged and shown by /ready;
the next request that needs the model tries the load again."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from litestar.datastructures import State

from omlx.engine.api import ModelPool

log = logging.getLogger(__name__)


def start_preload(pool: ModelPool, state: State) -> asyncio.Task[Any] | None:
    """Start loading the pool's default model; None when there is none."""
    name, _ = pool.model_state()
    if not name:
        return None

    async def preload() -> None:
        log.info("preloading default model %s", name)
        try:
            await pool.load(name)
        except Exception as e:
            state["preload_error"] = str(e)
            log.error("preloading default model %s failed: %s", name, e)
            return
        state.pop("preload_error", None)
        log.info("default model %s loaded; GET /ready answers 200", name)

    # The app keeps the task referenced (in state) so it is not collected mid-load.
    task = asyncio.create_task(preload(), name=f"omlx-preload-{name}")
    state["preload_task"] = task
    return task
