"""What the pool holds per loaded model, by type: a TextEngine (text) or a ModelWorker.

Loaders and forward passes are named by import path and imported on the model's own
thread, so the asyncio side never imports MLX.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omlx.workers.worker import ModelWorker, resolve

# Model type -> "module:function" of its loader, run on the worker thread.
WORKER_LOADERS = {
    "embedding": "omlx.workers.embeddings:load_embedding_model",
    "reranker": "omlx.workers.rerank:load_reranker",
    "vlm": "omlx.workers.vlm:load_vlm",
    "ocr": "omlx.workers.vlm:load_ocr",
}
VISION_TYPES = frozenset({"vlm", "ocr"})
TEXT_TYPES = frozenset({"llm"})


# Model types whose loaders take `cpu_attention` (omlx's BERT: omlx/workers/bert_cpu.py).
CPU_ATTENTION_TYPES = frozenset({"embedding", "reranker"})


def make_worker(
    name: str, path: Path, model_type: str, cpu_float32: str = "off", cpu_attention: str = "auto"
) -> ModelWorker:
    """`cpu_float32`: engine.cpu_float32, which every loader applies to its model;
    `cpu_attention`: engine.cpu_prefill_attention, for the types that take it."""
    target = WORKER_LOADERS[model_type]
    kwargs: dict[str, str] = {"cpu_float32": cpu_float32}
    if model_type in CPU_ATTENTION_TYPES:
        kwargs["cpu_attention"] = cpu_attention
    return ModelWorker(name, path, model_type, lambda n, p: resolve(target)(n, p, **kwargs))


def handle_bytes(handle: Any) -> int:
    """Measured bytes of a loaded handle's weights (0 when unknown)."""
    if isinstance(handle, ModelWorker):
        return handle.model_bytes
    metrics = getattr(handle, "metrics", None)
    return int(metrics.memory.get("model_bytes", 0)) if metrics is not None else 0
