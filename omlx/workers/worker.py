"""ModelWorker: one thread that loads a non-text model and runs every MLX call on it.

Embedding models and rerankers serve one forward pass per request: no continuous
batching, so a thread draining a queue of calls is all they need. MLX is imported on
that thread only (streams are thread-bound; the asyncio side never builds a graph).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import importlib
import logging
import queue
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")
_STOP = object()


class ModelWorker:
    """`loader(name, path)` runs on the worker thread; `call(fn)` runs `fn(model)` there.

    The loaded object may carry `weight_bytes` (its parameter bytes) for the pool.
    """

    def __init__(
        self, name: str, path: Path, kind: str, loader: Callable[[str, Path], Any]
    ) -> None:
        self.name = name
        self.path = path
        self.kind = kind  # the model type it serves: embedding, reranker, ...
        self._loader = loader
        self._calls: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._loaded: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._thread = threading.Thread(target=self._run, name=f"omlx-worker-{name}", daemon=True)
        self._closed = False
        self.model_bytes = 0  # parameter bytes, measured on the thread after the load
        self.loaded_memory_bytes = 0  # growth of MLX active memory during the load

    async def start(self) -> None:
        """Start the thread and wait for the weights (raises the loader's errors)."""
        self._thread.start()
        await asyncio.wrap_future(self._loaded)

    async def call(self, fn: Callable[[Any], T]) -> T:
        if self._closed:
            from omlx.errors import Overloaded

            raise Overloaded(f"model {self.name!r} is unloading; retry shortly")
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        self._calls.put((fn, future))
        return await asyncio.wrap_future(future)

    async def close(self, grace_s: float = 5.0) -> None:
        """Finish queued calls, then free the model and MLX's cache on the thread."""
        if self._closed:
            return
        self._closed = True
        if self._thread.is_alive():
            self._calls.put(_STOP)
            await asyncio.to_thread(self._thread.join, grace_s + 30.0)

    def _run(self) -> None:
        import mlx.core as mx

        try:
            before = mx.get_active_memory()
            model = self._loader(self.name, self.path)
            self.model_bytes = int(getattr(model, "weight_bytes", 0))
            self.loaded_memory_bytes = max(0, mx.get_active_memory() - before)
        except BaseException as e:
            self._loaded.set_exception(e)
            return
        self._loaded.set_result(None)
        try:
            while (item := self._calls.get()) is not _STOP:
                fn, future = item
                if not future.set_running_or_notify_cancel():
                    continue
                try:
                    future.set_result(fn(model))
                except BaseException as e:  # delivered to the awaiting coroutine
                    future.set_exception(e)
        finally:
            del model
            _free_mlx_memory()


def _free_mlx_memory() -> None:
    """Drop unreachable arrays, then return MLX's cached buffers to the system."""
    import gc

    import mlx.core as mx

    gc.collect()
    mx.clear_cache()


def on_thread(target: str, *args: Any, **kwargs: Any) -> Callable[[Any], Any]:
    """`fn(model)` that imports `module:function` (on the worker thread) and calls it."""

    def run(model: Any) -> Any:
        return resolve(target)(model, *args, **kwargs)

    return run


def resolve(target: str) -> Callable[..., Any]:
    module, _, function = target.partition(":")
    return getattr(importlib.import_module(module), function)
