"""uvicorn configuration shared by `omlx serve` and the live-server test fixture."""

from __future__ import annotations

import uvicorn
from litestar import Litestar

from omlx.settings import Settings

# Bursts of hundreds of concurrent streams must queue in the kernel, not be refused
# (mlx_lm.server's listen backlog of 5 drops connections under load).
LISTEN_BACKLOG = 4096
# On SIGINT/SIGTERM uvicorn stops accepting, then lets open streams run this long.
GRACEFUL_SHUTDOWN_S = 10


def uvicorn_config(
    app: Litestar, settings: Settings, *, graceful_shutdown_s: float = GRACEFUL_SHUTDOWN_S
) -> uvicorn.Config:
    return uvicorn.Config(
        app,
        host=settings.server.host,
        port=settings.server.port,
        backlog=LISTEN_BACKLOG,
        timeout_graceful_shutdown=int(graceful_shutdown_s) or None,
        timeout_keep_alive=30,
        # Logging is configured once by the CLI; uvicorn's access log is replaced by ours.
        log_config=None,
        access_log=False,
        lifespan="on",
        server_header=False,
    )
