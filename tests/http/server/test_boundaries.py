"""The server never imports MLX; uvicorn binds loopback with a deep listen backlog."""

from __future__ import annotations

import logging
import subprocess
import sys

from omlx.server.app import create_app
from omlx.server.request_log import RequestContextFilter, current_record
from omlx.server.run import uvicorn_config
from omlx.settings import Settings
from tests.fixtures.fake_pool import FakeModelPool


def test_server_imports_without_mlx() -> None:
    code = (
        "import sys; sys.modules['mlx'] = None; sys.modules['mlx_lm'] = None\n"
        "import omlx.server.app, omlx.server.routes.openai_chat, omlx.schemas.openai\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_uvicorn_defaults_loopback_and_deep_backlog() -> None:
    settings = Settings()
    config = uvicorn_config(create_app(FakeModelPool(), settings), settings)
    assert config.host == "127.0.0.1"
    assert config.port == 8000
    assert config.backlog >= 1024  # bursts of hundreds of connections must queue, not drop
    assert config.timeout_graceful_shutdown


def test_log_filter_tags_records_outside_requests() -> None:
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "m", None, None)
    assert RequestContextFilter().filter(record)
    assert (record.request_id, record.model) == ("-", "-")
    assert current_record().request_id == "-"
