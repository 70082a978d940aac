"""The Litestar application: routes, auth, CORS, error mapping, request logging."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from litestar import Litestar
from litestar.config.cors import CORSConfig
from litestar.datastructures import State

from omlx.engine.api import CacheAdmin, ModelPool
from omlx.server import admin as admin_ui
from omlx.server.auth import PUBLIC_ROUTES, PublicRoutes, SessionCheck, make_api_key_guard
from omlx.server.errors import exception_handler
from omlx.server.openapi import openapi_config
from omlx.server.origin import OriginPolicy, make_origin_guard
from omlx.server.preload import start_preload
from omlx.server.request_log import HttpCounters, RequestLogMiddleware
from omlx.server.routes import (
    anthropic,
    cache,
    embeddings,
    health,
    model_admin,
    models,
    openai_chat,
    openai_completions,
    rerank,
    responses,
    stats,
)
from omlx.settings import Settings


def create_app(
    pool: ModelPool,
    settings: Settings,
    *,
    close_pool_on_shutdown: bool = False,
    stats_interval_s: float = 1.0,
    extra_routes: Sequence[Any] = (),
    kv_cache: CacheAdmin | None = None,
    public_routes: PublicRoutes = PUBLIC_ROUTES,
    session_check: SessionCheck | None = None,
    admin_options: admin_ui.AdminOptions | None = None,
    on_startup: Sequence[Callable[[], Awaitable[None]]] = (),
) -> Litestar:
    """Build the app around `pool`; `close_pool_on_shutdown` when the app owns the pool.

    `kv_cache` (the tiered prefix cache the pool's engines use) gets the /api/cache routes
    and is closed after the pool, so blocks stored by finishing requests reach the disk.
    With an API key set every route needs it except `public_routes`; `session_check`
    lets a request without a key in when it holds another valid login (the admin's).
    `admin_options`: what the web admin needs beyond the settings (config file, sources,
    the model store). `on_startup`: run first when the server starts (the engine
    process's pool attaches to the event loop).
    """
    admin = admin_ui.Admin(pool, settings, kv_cache, admin_options)
    # The admin's pages and assets answer without the key (the pages send the browser to
    # the login themselves); its session lets the browser's own calls to /v1 and /api in.
    public_routes = public_routes.extended(admin_ui.PUBLIC_TEMPLATES)
    session_check = session_check or admin.session_check
    route_handlers: list[Any] = [
        *health.ROUTES,
        *model_admin.ROUTES,  # before models: /v1/models/status is not a model id
        *models.ROUTES,
        *openai_chat.ROUTES,
        *openai_completions.ROUTES,
        *stats.ROUTES,
        *anthropic.ROUTES,
        *responses.ROUTES,
        *cache.ROUTES,
        *embeddings.ROUTES,
        *rerank.ROUTES,
        *admin_ui.routes(),
        *extra_routes,
    ]

    async def start_pool() -> None:
        for hook in on_startup:
            await hook()

    async def preload(app: Litestar) -> None:
        if settings.engine.preload:
            start_preload(pool, app.state)

    async def close_pool() -> None:
        await admin.stop()
        if close_pool_on_shutdown:
            await pool.close()
            if kv_cache is not None:
                kv_cache.close()

    server = settings.server
    return Litestar(
        route_handlers=route_handlers,
        state=State(
            {
                "pool": pool,
                "settings": settings,
                "stats_interval_s": stats_interval_s,
                "cache": kv_cache,
                "admin": admin,
                "http_counters": HttpCounters(),
            }
        ),
        guards=[
            make_origin_guard(
                OriginPolicy.build(server.host, server.allowed_hosts, server.cors_origins)
            ),
            make_api_key_guard(server.api_key, public_routes, session_check),
        ],
        middleware=[RequestLogMiddleware, admin.middleware()],
        exception_handlers={Exception: exception_handler},
        cors_config=CORSConfig(allow_origins=list(server.cors_origins))
        if server.cors_origins
        else None,
        # Text routes hold their bodies to max_request_bytes themselves (json_body.py).
        request_max_body_size=max(server.max_request_bytes, server.max_image_request_bytes),
        on_startup=[start_pool, admin.start, preload],
        on_shutdown=[close_pool],
        openapi_config=openapi_config(),
        logging_config=None,
    )
