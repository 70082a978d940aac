"""A VLM/OCR request seen from asyncio: check images, run on the worker, stream events.

Images are fetched and verified before anything else, so a bad image is a 400 before
the model loads. No MLX here: the forward passes run in omlx.workers.vlm on the worker.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

from omlx.engine.api import Done, Failed, GenerationEvent, GenerationRequest
from omlx.workers.extras import VLM, require
from omlx.workers.images import ImageLimits, image_extra_keys, image_refs, load_images
from omlx.workers.worker import on_thread


def image_limits(models: Any) -> ImageLimits:
    """ImageLimits from the models settings section (defaults where it has no such field)."""
    defaults = ImageLimits()
    return ImageLimits(
        max_bytes=getattr(models, "image_max_bytes", defaults.max_bytes),
        fetch_timeout_s=getattr(models, "image_fetch_timeout_s", defaults.fetch_timeout_s),
        allow_local_paths=getattr(models, "image_local_paths", defaults.allow_local_paths),
    )


async def stream_vision(
    pool: Any, name: str, request: GenerationRequest
) -> AsyncIterator[GenerationEvent]:
    require(VLM, name)  # before images: checking them needs Pillow, which comes with it
    images = await load_images(
        image_refs(request.messages or []), image_limits(pool.settings.models)
    )
    # The prefix cache keys VLM prompts on these (one sha256 per image, in order).
    request_keys = image_extra_keys(images)
    del request_keys  # mlx-vlm keeps its own cache: nothing consumes the keys yet
    worker = await pool.load(name)
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[GenerationEvent] = asyncio.Queue()
    cancelled = threading.Event()

    def emit(event: GenerationEvent) -> None:
        if cancelled.is_set():
            raise _Stop
        loop.call_soon_threadsafe(queue.put_nowait, event)

    fn = on_thread(
        "omlx.workers.vlm:generate_vlm",
        request,
        images,
        emit,
        default_max_tokens=pool.settings.engine.default_max_tokens,
    )
    pool.policy.begin(name, time.monotonic())
    task = asyncio.ensure_future(worker.call(_stoppable(fn)))
    try:
        async for event in _drain(queue, task, request):
            yield event
    finally:
        cancelled.set()
        pool.policy.end(name, time.monotonic())


async def _drain(
    queue: asyncio.Queue[GenerationEvent], task: asyncio.Future[Any], request: GenerationRequest
) -> AsyncIterator[GenerationEvent]:
    num_events = 0
    while True:
        getter = asyncio.ensure_future(queue.get())
        await asyncio.wait({getter, task}, return_when=asyncio.FIRST_COMPLETED)
        if not getter.done():
            getter.cancel()
            if queue.empty():
                error = task.exception()
                if error is None:
                    return
                if num_events == 0:
                    raise error  # before the first event: the route maps it to a status
                yield Failed(request.request_id, error)
                return
            continue
        event = getter.result()
        num_events += 1
        yield event
        if isinstance(event, Done | Failed):
            return


class _Stop(Exception):
    """Raised inside the generation loop once the consumer went away."""


def _stoppable(fn: Any) -> Any:
    def run(model: Any) -> Any:
        try:
            return fn(model)
        except _Stop:
            return None

    return run
