"""uvicorn configuration shared by `omlx serve` and the live-server test fixture."""

from __future__ import annotations

import errno
import socket

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


class PortInUse(OSError):
    """The address is taken (another server, perhaps another `omlx serve`)."""


def bind_listen_socket(host: str, port: int) -> socket.socket:
    """Bind host:port before anything is announced, so a busy port fails first and
    uvicorn serves on exactly the socket that was checked (no check-then-bind race)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    # As uvicorn does: a restart may rebind while old connections sit in TIME_WAIT; a
    # live listener on the port still makes bind fail.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        if e.errno == errno.EADDRINUSE:
            raise PortInUse(e.errno, f"{host}:{port} is already in use") from e
        raise
    sock.set_inheritable(True)
    return sock
