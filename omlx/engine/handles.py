"""What the pool holds per loaded model, by type: an Engine (text) or a ModelWorker.

Loaders and forward passes are named by import path and imported on the model's own
thread, so the asyncio side never imports MLX.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from omlx.engine.worker import ModelWorker

# Model type -> "module:function" of its loader, run on the worker thread.
WORKER_LOADERS = {
    "embedding": "omlx.engine.embeddings:load_embedding_model",
    "reranker": "omlx.engine.rerank:load_reranker",
    "vlm": "omlx.engine.vlm:load_vlm",
    "ocr": "omlx.engine.vlm:load_ocr",
}
VISION_TYPES = frozenset({"vlm", "ocr"})
TEXT_TYPES = frozenset({"llm"})


def on_thread(target: str, *args: Any, **kwargs: Any) -> Callable[[Any], Any]:
    """`fn(model)` that imports `module:function` (on the worker thread) and calls it."""

    def run(model: Any) -> Any:
        return _resolve(target)(model, *args, **kwargs)

    return run


def _resolve(target: str) -> Callable[..., Any]:
    module, _, function = target.partition(":")
    return getattr(importlib.import_module(module), function)


def make_worker(name: str, path: Path, model_type: str) -> ModelWorker:
    target = WORKER_LOADERS[model_type]
    return ModelWorker(name, path, model_type, lambda n, p: _resolve(target)(n, p))


def handle_bytes(handle: Any) -> int:
    """Measured bytes of a loaded handle's weights (0 when unknown)."""
    if isinstance(handle, ModelWorker):
        return handle.model_bytes
    metrics = getattr(handle, "metrics", None)
    return int(metrics.memory.get("model_bytes", 0)) if metrics is not None else 0
