"""LocalModelPool: the ModelPool the server talks to; one TextEngine per loaded text model,
one ModelWorker per embedding model or reranker.

Models load on first use (concurrent first requests share one load). Loads run one at
a time under a memory budget: least-recently-used idle, unpinned models are unloaded
first (policy.py decides); idle models past their TTL are unloaded by a sweeper.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import sys
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import omlx
from omlx.engine.api import (
    EmbeddingRequest,
    EmbeddingResult,
    GenerationEvent,
    GenerationRequest,
    ModelInfo,
    PromptLogprobs,
    RequestId,
    RerankRequest,
    RerankResult,
)
from omlx.engine.commands import AltPath
from omlx.engine.engine import TextEngine
from omlx.errors import InvalidRequest, ModelNotFound
from omlx.models.types import NotAModelFolder, inspect_model
from omlx.pool.handles import (
    TEXT_TYPES,
    VISION_TYPES,
    WORKER_LOADERS,
    handle_bytes,
    make_worker,
)
from omlx.pool.memory_budget import budget_bytes, estimate_model_bytes
from omlx.pool.policy import PoolPolicy
from omlx.schemas.models import ModelStatus, PoolStatus
from omlx.schemas.stats import CacheStats, MemoryStats, StatsSnapshot
from omlx.settings import Settings
from omlx.workers.vision_stream import stream_vision
from omlx.workers.worker import on_thread

log = logging.getLogger(__name__)

MAX_SWEEP_INTERVAL_S = 1.0


class Resolver(Protocol):
    """omlx.models.store.ModelStore, duck-typed: resolve(name) and list()."""

    def resolve(self, name: str, *, allow_paths: bool = True) -> Any: ...

    def list(self) -> list[Any]: ...


@dataclass(frozen=True, slots=True)
class Resolved:
    name: str
    path: Path
    type: str = "llm"
    context_length: int | None = None


class LocalModelPool:
    """Implements omlx.engine.api.ModelPool over Engines."""

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
            prefix_factory: `(model, path) -> PrefixHooks`, called on the engine thread.
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
        self._engines: dict[str, asyncio.Future[TextEngine]] = {}
        self._resolved: dict[str, Resolved] = {}
        self._loading: dict[str, asyncio.Future[None]] = {}  # keeps load tasks referenced
        self._requests: dict[RequestId, TextEngine] = {}
        self._started_at = time.monotonic()
        models_settings = settings.models
        self.policy = PoolPolicy(
            budget_bytes(models_settings),
            default_ttl_s=models_settings.ttl_s,
            pinned=models_settings.pinned,
            ttl_overrides=dict(getattr(models_settings, "ttl_overrides_s", {}) or {}),
        )
        self._load_lock = asyncio.Lock()  # one load at a time: budget checks stay exact
        self._sweeper: asyncio.Task[None] | None = None
        self.num_loads = 0  # loads started (tests: concurrent first requests load once)

    # -- resolution and loading -----------------------------------------------------------

    async def resolve(self, name: str) -> Resolved:
        name = name or self._default
        if not name:
            raise ModelNotFound("no model named and no default model configured", param="model")
        if name in self._resolved:
            return self._resolved[name]
        found = await asyncio.to_thread(self._resolve_sync, name)
        self._resolved[name] = found
        # Later steps (load, unload) ask by the resolved name; a folder path resolves to
        # its last part, which the store alone would not find.
        self._resolved.setdefault(found.name, found)
        return found

    async def _resolve_typed(
        self, name: str, types: frozenset[str] | set[str], what: str
    ) -> Resolved:
        resolved = await self.resolve(name)
        if resolved.type not in types:
            raise InvalidRequest(
                f"model {resolved.name!r} is a {resolved.type} model; it cannot {what}",
                param="model",
            )
        return resolved

    def _resolve_sync(self, name: str) -> Resolved:
        if name in self._models:
            path = self._models[name]
            try:
                return Resolved(name, path, str(inspect_model(path, name=name).type))
            except (NotAModelFolder, OSError):
                return Resolved(name, path)
        if self._store is not None:
            # raises ModelNotFound
            e = self._store.resolve(name, allow_paths=self.settings.models.allow_paths)
            return Resolved(
                e.name,
                Path(e.path),
                str(getattr(e.type, "value", e.type)),
                getattr(e, "context_length", None),
            )
        path = Path(name).expanduser()
        if self.settings.models.allow_paths and (path / "config.json").is_file():
            return Resolved(path.resolve().name, path.resolve())
        known = ", ".join(self._models) or "none"
        raise ModelNotFound(f"model {name!r} not found; available: {known}", param="model")

    async def load(self, name: str) -> Any:
        """The engine (or worker) for name, loading it once however many callers ask at once."""
        resolved = await self.resolve(name)
        future = self._engines.get(resolved.name)
        if future is None:
            future = asyncio.get_running_loop().create_future()
            self._engines[resolved.name] = future
            self._loading[resolved.name] = asyncio.ensure_future(self._start(resolved, future))
        return await asyncio.shield(future)

    async def _start(self, resolved: Resolved, future: asyncio.Future[Any]) -> None:
        try:
            async with self._load_lock:
                handle = await self._load_within_budget(resolved)
        except Exception as e:
            self._engines.pop(resolved.name, None)  # a later request may retry the load
            self.policy.remove(resolved.name)
            if not future.done():
                future.set_exception(e)
            return
        finally:
            self._loading.pop(resolved.name, None)
        if future.done():  # the pool closed while loading
            await handle.close(0)
        else:
            future.set_result(handle)
            self._ensure_sweeper()

    async def _load_within_budget(self, resolved: Resolved) -> Any:
        """Unload LRU idle models until the estimate fits, then load and measure."""
        estimate = await asyncio.to_thread(
            estimate_model_bytes, resolved.path, cpu_float32=self._cpu_float32()
        )
        for victim in self.policy.plan_load(resolved.name, estimate):
            log.info("unloading %s to make room for %s", victim, resolved.name)
            await self._unload_named(victim, grace_s=0)
        self.policy.add(resolved.name, estimate, time.monotonic())
        self.num_loads += 1
        handle = self._make_handle(resolved)
        try:
            await handle.start()
        except BaseException:
            await handle.close(0)
            raise
        self.policy.loaded(resolved.name, handle_bytes(handle), time.monotonic())
        return handle

    def _cpu_float32(self) -> str:
        """engine.cpu_float32 where models compute on a CPU; "off" on a GPU."""
        from omlx.platform.device import on_gpu

        return "off" if on_gpu() else self.settings.engine.cpu_float32

    def _make_handle(self, resolved: Resolved) -> Any:
        if resolved.type in WORKER_LOADERS:
            engine = self.settings.engine
            return make_worker(
                resolved.name,
                resolved.path,
                resolved.type,
                engine.cpu_float32,
                engine.cpu_prefill_attention,
            )
        if resolved.type not in TEXT_TYPES:
            raise InvalidRequest(
                f"model {resolved.name!r} is a {resolved.type} model, which omlx cannot serve yet",
                param="model",
            )
        return TextEngine(
            resolved.name,
            resolved.path,
            self.settings.engine,
            prefix_factory=self._prefix_factory,
            alt_path=self._alt_paths.get(resolved.name),
        )

    async def unload(self, name: str, grace_s: float = 5.0) -> bool:
        resolved = await self.resolve(name)
        return await self._unload_named(resolved.name, grace_s)

    async def _unload_named(self, name: str, grace_s: float) -> bool:
        future = self._engines.pop(name, None)
        self.policy.remove(name)
        if future is None:
            return False
        try:
            handle = await future
        except Exception:  # its load failed: nothing to free
            return False
        await handle.close(grace_s)
        log.info("unloaded model %s", name)
        return True

    def _loaded_handles(self) -> dict[str, Any]:
        return {
            name: f.result()
            for name, f in self._engines.items()
            if f.done() and not f.cancelled() and f.exception() is None
        }

    def loaded_engines(self) -> list[TextEngine]:
        return [h for h in self._loaded_handles().values() if isinstance(h, TextEngine)]

    # -- pins, TTL, status -----------------------------------------------------------------

    async def pin(self, name: str) -> None:
        """Never unload `name` automatically (until unpinned); it need not be loaded."""
        self.policy.pin((await self.resolve(name)).name)

    async def unpin(self, name: str) -> None:
        self.policy.unpin((await self.resolve(name)).name)

    async def set_ttl(self, name: str | None, ttl_s: float | None) -> None:
        self.policy.set_ttl((await self.resolve(name)).name if name else None, ttl_s)
        self._ensure_sweeper()

    def _ensure_sweeper(self) -> None:
        ttls = [self.policy.default_ttl_s, *self.policy.ttl_overrides.values()]
        if self._sweeper is None and any(t > 0 for t in ttls):
            interval = min(MAX_SWEEP_INTERVAL_S, min(t for t in ttls if t > 0) / 4)
            self._sweeper = asyncio.ensure_future(self._sweep(max(interval, 0.02)))

    async def _sweep(self, interval_s: float) -> None:
        """Unload idle models whose TTL ran out (never pinned or busy ones)."""
        while True:
            await asyncio.sleep(interval_s)
            for name in self.policy.expired(time.monotonic()):
                log.info("unloading %s: idle past its TTL", name)
                try:
                    await self._unload_named(name, grace_s=0)
                except Exception:
                    log.exception("TTL unload of %s failed", name)

    def status(self) -> PoolStatus:
        now_mono, now = time.monotonic(), time.time()
        types = {m.id: m.type for m in self.list_models()}
        rows: list[ModelStatus] = []
        for name in sorted({*types, *self.policy.entries}):
            entry = self.policy.entries.get(name)
            state = "available" if entry is None else "loading" if entry.is_loading else "loaded"
            ttl = self.policy.ttl_of(name)
            rows.append(
                ModelStatus(
                    id=name,
                    type=types.get(name) or self._type_of(name),
                    state=state,
                    pinned=name in self.policy.pinned,
                    memory_bytes=entry.size_bytes if entry else 0,
                    estimated_bytes=entry.estimated_bytes if entry else None,
                    last_used=now - (now_mono - entry.last_used_s) if entry else None,
                    ttl_s=ttl if ttl > 0 else None,
                    ttl_left_s=self.policy.ttl_left_s(name, now_mono),
                    in_flight=entry.in_flight if entry else 0,
                )
            )
        return PoolStatus(
            budget_bytes=self.policy.budget_bytes, used_bytes=self.policy.used_bytes, data=rows
        )

    def model_state(self, name: str | None = None) -> tuple[str, str]:
        name = self._default if name is None else name
        entry = self.policy.entries.get(name)
        if entry is None:
            return name, "available"
        return name, "loading" if entry.is_loading else "loaded"

    def _type_of(self, name: str) -> str:
        found = next((r.type for r in self._resolved.values() if r.name == name), None)
        if found is None and name in self._models:
            try:  # safetensors headers only: cheap enough for a listing
                found = str(inspect_model(self._models[name], name=name).type)
            except (NotAModelFolder, OSError):
                found = None
        return found or "llm"

    # -- ModelPool ------------------------------------------------------------------------

    async def generate(self, request: GenerationRequest) -> AsyncIterator[GenerationEvent]:
        resolved = await self._resolve_typed(
            request.model, TEXT_TYPES | VISION_TYPES, "generate text"
        )
        if resolved.type in VISION_TYPES:
            async for event in stream_vision(self, resolved.name, request):
                yield event
            return
        engine = await self.load(resolved.name)
        self._requests[request.request_id] = engine
        self.policy.begin(resolved.name, time.monotonic())
        try:
            async with contextlib.aclosing(engine.generate(request)) as events:
                async for event in events:
                    yield event
        finally:
            self._requests.pop(request.request_id, None)
            self.policy.end(resolved.name, time.monotonic())

    async def generate_into(
        self, request: GenerationRequest, deliver: Callable[[GenerationEvent], None]
    ) -> None:
        """`generate`, each event handed to `deliver` as the engine's step hands it over
        (the engine process forwards them so); returns after Done or Failed."""
        resolved = await self._resolve_typed(
            request.model, TEXT_TYPES | VISION_TYPES, "generate text"
        )
        if resolved.type in VISION_TYPES:
            async for event in stream_vision(self, resolved.name, request):
                deliver(event)
            return
        engine = await self.load(resolved.name)
        self._requests[request.request_id] = engine
        self.policy.begin(resolved.name, time.monotonic())
        try:
            await engine.generate_into(request, deliver)
        finally:
            self._requests.pop(request.request_id, None)
            self.policy.end(resolved.name, time.monotonic())

    async def count_tokens(self, request: GenerationRequest) -> int:
        resolved = await self._resolve_typed(request.model, TEXT_TYPES, "generate text")
        return await (await self.load(resolved.name)).count_tokens(request)

    async def embed(self, request: EmbeddingRequest) -> EmbeddingResult:
        resolved = await self._resolve_typed(request.model, {"embedding"}, "embed")
        vectors, num_tokens, num_truncated = await self._on_worker(
            resolved.name,
            on_thread(
                "omlx.workers.embeddings:embed",
                request.inputs,
                request.dimensions,
                request.truncate,
            ),
        )
        return EmbeddingResult(resolved.name, vectors, num_tokens, num_truncated)

    async def rerank(self, request: RerankRequest) -> RerankResult:
        resolved = await self._resolve_typed(request.model, {"reranker", "llm"}, "rerank")
        args = (request.query, request.documents, request.instruction)
        if resolved.type == "llm":  # any chat model can judge relevance yes/no
            scores, num_tokens = await self._on_text_engine(resolved.name, args)
        else:
            scores, num_tokens = await self._on_worker(
                resolved.name, on_thread("omlx.workers.rerank:rerank", *args)
            )
        return RerankResult(resolved.name, scores, num_tokens)

    async def _on_worker(self, name: str, fn: Callable[[Any], Any]) -> Any:
        worker = await self.load(name)
        self.policy.begin(name, time.monotonic())
        try:
            return await worker.call(fn)
        finally:
            self.policy.end(name, time.monotonic())

    async def prompt_logprobs(self, model: str, prompt: str, top_n: int) -> PromptLogprobs:
        resolved = await self._resolve_typed(model, TEXT_TYPES, "score a prompt")
        texts, values, tops = await self._on_text_engine(
            resolved.name, (prompt, top_n), "omlx.workers.prompt_logprobs:prompt_logprobs"
        )
        return PromptLogprobs(texts, values, tops)

    async def _on_text_engine(
        self,
        name: str,
        args: tuple[Any, ...],
        target: str = "omlx.workers.rerank:rerank_with_causal_lm",
    ) -> Any:
        """`target(model_and_tokenizer, *args)` with a loaded text model, on its engine
        thread (yes/no reranking, prompt log-probabilities)."""
        engine = await self.load(name)
        self.policy.begin(name, time.monotonic())
        try:
            lm = engine.engine_loop.loaded_model
            fn = on_thread(target, *args)
            return await engine.call(lambda: fn((lm().model, lm().tokenizer)))
        finally:
            self.policy.end(name, time.monotonic())

    def cancel(self, request_id: RequestId) -> None:
        engine = self._requests.get(request_id)
        if engine is not None:
            engine.cancel(request_id)

    def list_models(self) -> list[ModelInfo]:
        loaded = self._loaded_handles()
        pinned = self.policy.pinned
        infos: dict[str, ModelInfo] = {}
        for entry in self._store.list() if self._store is not None else []:
            e = loaded.get(entry.name)
            infos[entry.name] = ModelInfo(
                id=entry.name,
                type=str(getattr(entry.type, "value", entry.type)),
                loaded=e is not None,
                pinned=entry.name in pinned or bool(getattr(entry, "pinned", False)),
                context_length=getattr(entry, "context_length", None),
                memory_bytes=handle_bytes(e) if e else 0,
            )
        for name in [*self._models, *loaded]:
            if name not in infos:
                e = loaded.get(name)
                spec = getattr(e, "spec", None)
                infos[name] = ModelInfo(
                    id=name,
                    type=self._type_of(name),
                    loaded=e is not None,
                    pinned=name in pinned,
                    context_length=spec.context_length if spec else None,
                    memory_bytes=handle_bytes(e) if e else 0,
                )
        return list(infos.values())

    def stats(self) -> StatsSnapshot:
        models, requests = [], []
        memory = MemoryStats(
            process_rss_bytes=process_rss_bytes(), budget_bytes=self.policy.budget_bytes
        )
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
            blas=_blas(),
        )

    async def close(self, grace_s: float = 5.0) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
        engines = list(self._loaded_handles().values())
        for f in self._engines.values():
            if not f.done():
                f.cancel()
        self._engines.clear()
        await asyncio.gather(*(e.close(grace_s) for e in engines))


@functools.cache
def _blas() -> str:
    # Fixed for the life of the process (the BLAS is chosen before MLX loads).
    from omlx.platform.blas import blas_description

    return blas_description()


def process_rss_bytes() -> int:
    """Resident set size now (Linux /proc), else the peak (macOS getrusage, bytes)."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        pages = int(Path("/proc/self/statm").read_text().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE")
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024
