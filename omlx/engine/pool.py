"""ModelPool: the EnginePool the server talks to; one Engine per loaded text model.

Models load on first use (concurrent first requests share one load). Issue 4 extends
this with a memory budget, LRU unloading, pinning and TTL: `load`/`unload` are the seam.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import omlx
from omlx.engine.api import GenerationEvent, GenerationRequest, ModelInfo, RequestId
from omlx.engine.commands import AltPath
from omlx.engine.engine import Engine
from omlx.errors import InvalidRequest, ModelNotFound
from omlx.schemas.stats import CacheStats, MemoryStats, StatsSnapshot
from omlx.settings import Settings

log = logging.getLogger(__name__)

TEXT_TYPES = {"llm"}


class Resolver(Protocol):
    """omlx.engine.model_store.ModelStore, duck-typed: resolve(name) and list()."""

    def resolve(self, name: str) -> Any: ...

    def list(self) -> list[Any]: ...


@dataclass(frozen=True, slots=True)
class Resolved:
    name: str
    path: Path
    type: str = "llm"
    context_length: int | None = None


class ModelPool:
    """Implements omlx.engine.api.EnginePool over Engines."""

    def __init__(
        self,
        settings: Settings,
        *,
        store: Resolver | None = None,
        models: Mapping[str, Path] | None = None,
        default_model: str | None = None,
        prefix_factory: Callable[[Any, Path], Any] | None = None,
        alt_paths: Mapping[str, AltPath] | None = None,
        cache_stats: Callable[[], CacheStats] | None = None,
    ) -> None:
        """
        Args:
            store: resolves names (a ModelStore); `models` maps extra names to folders.
            default_model: used when a request names no model and settings name none
                (the lead wires `ensure_default_model` here).
            prefix_factory: `(model, path) -> ModelPrefixCache`, called on the engine thread.
            alt_paths: model name -> alternative generator (DFlash).
            cache_stats: the prefix cache's `stats` (PrefixCache.stats), for stats().
        """
        self.settings = settings
        self._store = store
        self._models = {k: Path(v) for k, v in (models or {}).items()}
        self._default = settings.engine.default_model or default_model or ""
        self._prefix_factory = prefix_factory
        self._alt_paths = dict(alt_paths or {})
        self._cache_stats = cache_stats
        self._engines: dict[str, asyncio.Future[Engine]] = {}
        self._resolved: dict[str, Resolved] = {}
        self._loading: dict[str, asyncio.Future[None]] = {}  # keeps load tasks referenced
        self._requests: dict[RequestId, Engine] = {}
        self._started_at = time.monotonic()

    # -- resolution and loading -----------------------------------------------------------

    async def resolve(self, name: str) -> Resolved:
        name = name or self._default
        if not name:
            raise ModelNotFound("no model named and no default model configured", param="model")
        if name in self._resolved:
            return self._resolved[name]
        found = await asyncio.to_thread(self._resolve_sync, name)
        if found.type not in TEXT_TYPES:
            raise InvalidRequest(
                f"model {found.name!r} is a {found.type} model; it cannot generate text",
                param="model",
            )
        self._resolved[name] = found
        return found

    def _resolve_sync(self, name: str) -> Resolved:
        if name in self._models:
            return Resolved(name, self._models[name])
        if self._store is not None:
            e = self._store.resolve(name)  # raises ModelNotFound
            return Resolved(
                e.name,
                Path(e.path),
                str(getattr(e.type, "value", e.type)),
                getattr(e, "context_length", None),
            )
        path = Path(name).expanduser()
        if (path / "config.json").is_file():
            return Resolved(path.resolve().name, path.resolve())
        known = ", ".join(self._models) or "none"
        raise ModelNotFound(f"model {name!r} not found; available: {known}", param="model")

    async def load(self, name: str) -> Engine:
        """The engine for name, loading it once however many callers ask at once."""
        resolved = await self.resolve(name)
        future = self._engines.get(resolved.name)
        if future is None:
            future = asyncio.get_running_loop().create_future()
            self._engines[resolved.name] = future
            self._loading[resolved.name] = asyncio.ensure_future(self._start(resolved, future))
        return await asyncio.shield(future)

    async def _start(self, resolved: Resolved, future: asyncio.Future[Engine]) -> None:
        engine = Engine(
            resolved.name,
            resolved.path,
            self.settings.engine,
            prefix_factory=self._prefix_factory,
            alt_path=self._alt_paths.get(resolved.name),
        )
        try:
            await engine.start()
        except Exception as e:
            self._engines.pop(resolved.name, None)  # a later request may retry the load
            if not future.done():
                future.set_exception(e)
            return
        finally:
            self._loading.pop(resolved.name, None)
        if future.done():  # the pool closed while loading
            await engine.close(0)
        else:
            future.set_result(engine)

    async def unload(self, name: str, grace_s: float = 5.0) -> bool:
        resolved = await self.resolve(name)
        future = self._engines.pop(resolved.name, None)
        if future is None:
            return False
        engine = await future
        await engine.close(grace_s)
        return True

    def loaded_engines(self) -> list[Engine]:
        return [
            f.result()
            for f in self._engines.values()
            if f.done() and not f.cancelled() and f.exception() is None
        ]

    # -- EnginePool ------------------------------------------------------------------------

    async def generate(self, request: GenerationRequest) -> AsyncIterator[GenerationEvent]:
        engine = await self.load(request.model)
        self._requests[request.request_id] = engine
        try:
            async with contextlib.aclosing(engine.generate(request)) as events:
                async for event in events:
                    yield event
        finally:
            self._requests.pop(request.request_id, None)

    async def count_tokens(self, request: GenerationRequest) -> int:
        return await (await self.load(request.model)).count_tokens(request)

    def cancel(self, request_id: RequestId) -> None:
        engine = self._requests.get(request_id)
        if engine is not None:
            engine.cancel(request_id)

    def list_models(self) -> list[ModelInfo]:
        loaded = {e.name: e for e in self.loaded_engines()}
        infos: dict[str, ModelInfo] = {}
        for entry in self._store.list() if self._store is not None else []:
            e = loaded.get(entry.name)
            infos[entry.name] = ModelInfo(
                id=entry.name,
                type=str(getattr(entry.type, "value", entry.type)),
                loaded=e is not None,
                pinned=bool(getattr(entry, "pinned", False)),
                context_length=getattr(entry, "context_length", None),
                memory_bytes=e.metrics.memory.get("model_bytes", 0) if e else 0,
            )
        for name in [*self._models, *loaded]:
            if name not in infos:
                e = loaded.get(name)
                infos[name] = ModelInfo(
                    id=name,
                    type="llm",
                    loaded=e is not None,
                    context_length=e.spec.context_length if e and e.spec else None,
                    memory_bytes=e.metrics.memory.get("model_bytes", 0) if e else 0,
                )
        return list(infos.values())

    def stats(self) -> StatsSnapshot:
        models, requests, memory = [], [], MemoryStats(process_rss_bytes=process_rss_bytes())
        for engine in self.loaded_engines():
            model_stats, running = engine.metrics.snapshot()
            models.append(model_stats)
            requests.extend(running)
            mem = engine.metrics.memory  # MLX memory is process-wide: any engine's reading
            memory.mlx_active_bytes = mem.get("mlx_active_bytes", memory.mlx_active_bytes)
            memory.mlx_peak_bytes = mem.get("mlx_peak_bytes", memory.mlx_peak_bytes)
            memory.mlx_cache_bytes = mem.get("mlx_cache_bytes", memory.mlx_cache_bytes)
        return StatsSnapshot(
            time=time.time(),
            uptime_s=time.monotonic() - self._started_at,
            version=omlx.__version__,
            running=sum(m.running for m in models),
            queued=sum(m.queued for m in models),
            prompt_tps=sum(m.prompt_tps for m in models),
            generation_tps=sum(m.generation_tps for m in models),
            requests_total=sum(m.requests_total for m in models),
            models=models,
            requests=requests,
            memory=memory,
            cache=self._cache_stats() if self._cache_stats is not None else CacheStats(),
        )

    async def close(self, grace_s: float = 5.0) -> None:
        engines = self.loaded_engines()
        for f in self._engines.values():
            if not f.done():
                f.cancel()
        self._engines.clear()
        await asyncio.gather(*(e.close(grace_s) for e in engines))


def process_rss_bytes() -> int:
    """Resident set size now (Linux /proc), else the peak (macOS getrusage, bytes)."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        pages = int(Path("/proc/self/statm").read_text().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE")
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024
