"""`omlx launch` through Typer's CliRunner against a live server (scripted pool).

The merge itself is covered per tool in tests/unit/integrations; here: finding the
server, picking the model, --dry-run, --no-exec, --json and the errors a user sees.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from omlx.cli.main import app
from omlx.settings import ServerSettings, Settings
from tests.fixtures.fake_pool import FakeModelPool
from tests.fixtures.live_server import LiveServer, running_server

runner = CliRunner()


@pytest.fixture(scope="module")
def live() -> Iterator[LiveServer]:
    pool = FakeModelPool(models=("fake-model", "other-model"))
    settings = Settings(server=ServerSettings(api_key="sk-test-key"))
    with running_server(pool, settings) as server:
        yield server


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("OMLX_SERVER__API_KEY", "sk-test-key")
    for var in ("CODEX_HOME", "PI_CODING_AGENT_DIR", "XDG_CONFIG_HOME", "HERMES_HOME"):
        monkeypatch.delenv(var, raising=False)
    return tmp_path


def _launch(live: LiveServer, *args: str):
    return runner.invoke(app, ["launch", *args, "--url", live.base_url])


def test_dry_run_prints_the_diff_and_writes_nothing(live: LiveServer, home: Path) -> None:
    result = _launch(live, "codex", "--model", "fake-model", "--dry-run")
    assert result.exit_code == 0, result.output
    assert "[model_providers.omlx]" in result.output
    assert 'env_key = "OMLX_API_KEY"' in result.output
    assert "codex --profile omlx" in result.output
    assert "sk-test-key" not in result.output  # the key is masked: OMLX_API_KEY=****
    assert "OMLX_API_KEY=****" in result.output
    assert not (home / ".codex").exists()


def test_no_exec_writes_the_config_and_prints_the_masked_command(
    live: LiveServer, home: Path
) -> None:
    result = _launch(live, "pi", "--model", "fake-model", "--no-exec", "--json")
    assert result.exit_code == 0, result.output
    shown = json.loads(result.output)
    assert shown["status"] == "configured"
    assert shown["command"] == "pi --provider omlx --model fake-model"
    assert shown["env"] == {"OMLX_API_KEY": "****"}
    models = json.loads((home / ".pi/agent/models.json").read_text())
    assert models["providers"]["omlx"]["baseUrl"] == f"{live.base_url}/v1"
    again = _launch(live, "pi", "--model", "fake-model", "--dry-run")
    assert "no file changes" in again.output  # idempotent
    undone = runner.invoke(app, ["launch", "pi", "--undo"])
    assert undone.exit_code == 0 and "restored" in undone.output
    assert not (home / ".pi/agent/models.json").exists()


def test_without_a_terminal_a_missing_model_is_a_clear_json_error(
    live: LiveServer, home: Path
) -> None:
    result = _launch(live, "opencode", "--json")
    assert result.exit_code == 1
    error = json.loads(result.output)
    assert "pass --model" in error["error"]
    assert [m["id"] for m in error["models"]] == ["fake-model", "other-model"]


def test_unknown_model_and_missing_server_are_clear_errors(home: Path, live: LiveServer) -> None:
    unknown = _launch(live, "codex", "--model", "nope", "--json")
    assert unknown.exit_code == 1
    assert "fake-model, other-model" in json.loads(unknown.output)["error"]
    gone = runner.invoke(
        app, ["launch", "codex", "--model", "x", "--url", "http://127.0.0.1:9", "--json"]
    )
    assert gone.exit_code == 1
    assert "no omlx server answers" in json.loads(gone.output)["error"]


def test_list_reports_every_tool(home: Path) -> None:
    result = runner.invoke(app, ["launch", "list", "--json"])
    assert result.exit_code == 0, result.output
    rows = {r["name"]: r for r in json.loads(result.output)}
    assert list(rows) == ["claude", "codex", "opencode", "openclaw", "hermes", "copilot", "pi"]
    assert rows["codex"]["config_paths"] == [
        str(home / ".codex/config.toml"),
        str(home / ".codex/omlx.config.toml"),
    ]
    assert rows["copilot"]["configured"] is None  # environment only
    assert rows["pi"]["configured"] is False
