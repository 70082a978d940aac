"""Settings: precedence defaults < file < env < CLI, sources, parsing and validation."""

from __future__ import annotations

import msgspec
import pytest

from omlx.settings import (
    SettingsError,
    all_keys,
    config_path,
    description,
    env_var,
    load_settings,
    parse_value,
    read_file,
    set_value,
    update_list,
    write_file,
)


def test_defaults_when_nothing_is_set():
    loaded = load_settings()
    assert loaded.settings.server.port == 8000
    assert loaded.settings.server.host == "127.0.0.1"
    assert set(loaded.sources.values()) == {"default"}
    assert loaded.path == config_path()


def test_precedence_default_file_env_cli(monkeypatch):
    write_file(config_path(), {"server": {"port": 8001, "host": "0.0.0.0"}})
    loaded = load_settings()
    assert loaded.settings.server.port == 8001
    assert loaded.sources["server.port"] == "file"
    assert loaded.sources["server.keepalive_mode"] == "default"

    monkeypatch.setenv("OMLX_SERVER__PORT", "8002")
    loaded = load_settings()
    assert loaded.settings.server.port == 8002
    assert loaded.sources["server.port"] == "env"
    assert loaded.settings.server.host == "0.0.0.0"  # the file still counts where env is silent
    assert loaded.sources["server.host"] == "file"

    loaded = load_settings(cli={"server.port": 8003, "server.host": None})
    assert loaded.settings.server.port == 8003
    assert loaded.sources["server.port"] == "cli"
    assert loaded.sources["server.host"] == "file"  # a None flag means "not given"


def test_config_path_follows_omlx_home_and_omlx_config(monkeypatch, tmp_path):
    monkeypatch.setenv("OMLX_HOME", str(tmp_path / "h"))
    assert config_path() == tmp_path / "h" / "config.toml"
    monkeypatch.setenv("OMLX_CONFIG", str(tmp_path / "c.toml"))
    assert config_path() == tmp_path / "c.toml"


def test_env_var_names():
    assert env_var("server.port") == "OMLX_SERVER__PORT"
    assert env_var("engine.max_running") == "OMLX_ENGINE__MAX_RUNNING"
    assert "server.port" in all_keys()
    assert description("server.port") == "TCP port"


@pytest.mark.parametrize(
    ("key", "raw", "expected"),
    [
        ("server.port", "9000", 9000),
        ("server.host", "0.0.0.0", "0.0.0.0"),
        ("server.api_key", "123", "123"),  # digits stay a string for a str field
        ("server.api_key", "true", "true"),
        ("server.keepalive_interval_s", "2.5", 2.5),
        ("cache.enabled", "false", False),
        ("cache.enabled", "true", True),
        ("server.cors_origins", "http://a,http://b", ["http://a", "http://b"]),
        ("server.cors_origins", '["http://a"]', ["http://a"]),
        ("server.cors_origins", "", []),
        ("models.pinned", "one", ["one"]),
        ("log.level", "DEBUG", "DEBUG"),
        ("engine.dtype", "bfloat16", "bfloat16"),
        ("cache.partial_blocks", "auto", "auto"),
        ("cache.partial_blocks", "false", False),
        ("engine.prefill_batch_size", "0", 0),
    ],
)
def test_parse_value(key, raw, expected):
    assert parse_value(key, raw) == expected


@pytest.mark.parametrize(
    ("key", "raw", "message"),
    [
        ("server.port", "abc", "server.port"),
        ("server.port", "70000", "65535"),
        ("server.port", "-1", ">= 0"),
        ("engine.max_running", "0", ">= 1"),
        ("log.level", "LOUD", "log.level"),
        ("cache.enabled", "maybe", "cache.enabled"),
        ("server.keepalive_interval_s", "0", "> 0"),
        ("cache.partial_blocks", "sometimes", "cache.partial_blocks"),
        ("engine.prefill_batch_size", "-1", ">= 0"),
    ],
)
def test_parse_value_rejects_bad_values(key, raw, message):
    with pytest.raises(SettingsError, match="bad value") as info:
        parse_value(key, raw)
    assert message in str(info.value)


@pytest.mark.parametrize("key", ["port", "server.nope", "nosection.port", "server.port.x", ""])
def test_unknown_keys_are_rejected(key):
    with pytest.raises(SettingsError, match="unknown setting"):
        set_value(key, "1")


def test_bad_env_value_names_the_variable(monkeypatch):
    monkeypatch.setenv("OMLX_SERVER__PORT", "lots")
    with pytest.raises(SettingsError, match="OMLX_SERVER__PORT"):
        load_settings()


def test_set_value_writes_typed_toml_and_keeps_other_keys():
    set_value("server.port", "9001")
    set_value("server.cors_origins", "http://a,http://b")
    set_value("log.level", "DEBUG")
    data = read_file(config_path())
    assert data == {
        "server": {"port": 9001, "cors_origins": ["http://a", "http://b"]},
        "log": {"level": "DEBUG"},
    }
    loaded = load_settings()
    assert loaded.settings.server.port == 9001
    assert loaded.sources["log.level"] == "file"


def test_set_value_leaves_the_file_alone_on_bad_value():
    set_value("server.port", "9001")
    before = config_path().read_text()
    with pytest.raises(SettingsError):
        set_value("server.port", "99999")
    assert config_path().read_text() == before


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[server\nport = 1", "not valid TOML"),
        ("[nope]\nx = 1\n", "unknown section"),
        ("port = 1\n", "unknown section"),
        ("[server]\nprot = 1\n", "unknown setting 'server.prot'"),
    ],
)
def test_bad_files_are_rejected_with_the_path(text, message):
    config_path().write_text(text)
    with pytest.raises(SettingsError, match=message) as info:
        load_settings()
    assert str(config_path()) in str(info.value)


def test_bad_value_in_file_names_file_and_key():
    config_path().write_text('[server]\nport = "eighty"\n')
    with pytest.raises(SettingsError) as info:
        load_settings()
    assert str(config_path()) in str(info.value)
    assert "server.port" in str(info.value)


def test_update_list_adds_once_and_removes():
    assert update_list("models.pinned", "a", add=True) == ["a"]
    assert update_list("models.pinned", "b", add=True) == ["a", "b"]
    assert update_list("models.pinned", "a", add=True) == ["a", "b"]
    assert update_list("models.pinned", "a", add=False) == ["b"]
    assert load_settings().settings.models.pinned == ["b"]


def test_write_file_is_atomic_and_leaves_no_temp(tmp_path):
    path = tmp_path / "sub" / "config.toml"
    write_file(path, {"server": {"port": 1}})
    assert read_file(path) == {"server": {"port": 1}}
    assert [p.name for p in path.parent.iterdir()] == ["config.toml"]


def test_device_defaults_resolve_per_device_kind():
    """auto values: what suits the CPU there, what suits a GPU there; set values win."""
    engine = load_settings().settings.engine
    assert engine.prefill_batch_size == 0  # auto by default
    assert engine.prefill_rows(cuda=False) == 8
    assert engine.prefill_rows(cuda=True) == min(engine.max_running, 64)
    few = msgspec.structs.replace(engine, max_running=16)
    assert few.prefill_rows(cuda=True) == 16  # never more rows than run at once
    fixed = msgspec.structs.replace(engine, prefill_batch_size=3)
    assert (fixed.prefill_rows(cuda=False), fixed.prefill_rows(cuda=True)) == (3, 3)

    cache = load_settings().settings.cache
    assert cache.partial_blocks == "auto"
    assert (cache.reuse_partial_blocks(cuda=False), cache.reuse_partial_blocks(cuda=True)) == (
        True,
        False,
    )
    assert cache.store_while_busy == "auto"
    assert (cache.stores_while_busy(cuda=False), cache.stores_while_busy(cuda=True)) == (
        True,
        False,
    )
    for value in (True, False):
        fixed_store = msgspec.structs.replace(cache, store_while_busy=value)
        assert fixed_store.stores_while_busy(cuda=False) is value
        assert fixed_store.stores_while_busy(cuda=True) is value
        set_ = msgspec.structs.replace(cache, partial_blocks=value)
        assert set_.reuse_partial_blocks(cuda=False) is value
        assert set_.reuse_partial_blocks(cuda=True) is value
