"""Each tool's config merge: the user's providers, keys and comments survive, a backup is
made first, a second run changes nothing, undo restores the bytes, malformed files are
refused untouched, and a dry run writes nothing."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from omlx.integrations import TOOLS, jsonc
from omlx.integrations.files import BACKUP_TAG
from omlx.integrations.launcher import LaunchError, apply_plan, plan_launch, render, undo_tool
from omlx.integrations.server import ServedModel, Server
from omlx.integrations.tool import Target

MODEL = ServedModel(
    id="SmolLM2-135M-Instruct", type="llm", context_tokens=8192, max_output_tokens=2048
)
SERVER = Server(root="http://127.0.0.1:8123")
KEYED = Server(root="http://127.0.0.1:8123", api_key="sk-secret-123")

# What the user had before omlx: other providers, their own keys, comments.
EXISTING: dict[str, dict[str, str]] = {
    "codex": {
        ".codex/config.toml": (
            '# my codex setup\nmodel = "gpt-5.5"\nmodel_provider = "openai"\n\n'
            '[model_providers.ollama]\nname = "Ollama"  # local\nbase_url = '
            '"http://localhost:11434/v1"\n\n[mcp_servers.docs]\ncommand = "docs-mcp"\n'
        ),
    },
    "opencode": {
        ".config/opencode/opencode.jsonc": (
            '{\n  // my settings\n  "$schema": "https://opencode.ai/config.json",\n'
            '  "model": "anthropic/claude-sonnet-4-5",\n  "provider": {\n'
            '    "ollama": {"npm": "@ai-sdk/openai-compatible", "options": '
            '{"baseURL": "http://localhost:11434/v1"}}, // keep me\n  },\n'
            '  "theme": "tokyonight"\n}\n'
        ),
    },
    "openclaw": {
        ".openclaw/openclaw.json": (
            "// OpenClaw config (JSON5)\n{\n  agents: {\n    defaults: {\n"
            "      model: { primary: 'anthropic/claude-opus-4-6', fallbacks: ['openai/gpt-5'] },\n"
            "    },\n  },\n  models: {\n    mode: 'merge',\n    providers: {\n"
            "      lmstudio: { baseUrl: 'http://127.0.0.1:1234/v1', api: 'openai-responses',"
            " models: [{ id: 'qwen' }] },\n    },\n  },\n  channels: { telegram: "
            "{ enabled: true } },\n}\n"
        ),
    },
    "hermes": {
        ".hermes/config.yaml": (
            "# Hermes config\nmodel:\n  default: anthropic/claude-opus-4.6  # main\n"
            "  provider: openrouter\nproviders:\n  local:\n    api: http://localhost:1234/v1\n"
            "    default_model: qwen\ntoolsets:\n- hermes-cli\n"
        ),
    },
    "pi": {
        ".pi/agent/models.json": (
            '{\n  "providers": {\n    "ollama": {\n      "baseUrl": "http://localhost:11434/v1",'
            '\n      "api": "openai-completions",\n      "apiKey": "ollama",\n'
            '      "models": [{"id": "llama3.1:8b"}]\n    }\n  }\n}\n'
        ),
        ".pi/agent/settings.json": (
            '{\n  "defaultProvider": "anthropic",\n  "defaultModel": "claude-sonnet-4",\n'
            '  "theme": "dark",\n  "quietStartup": true\n}\n'
        ),
    },
    "claude": {
        ".omlx/config.toml": "# omlx\n[server]\nport = 8123\n\n[agents]\nmodel_aliases = {}\n",
    },
}
FILE_TOOLS = sorted(EXISTING)


def _env(home: Path) -> dict[str, str]:
    return {"HOME": str(home), "PATH": ""}


def _seed(home: Path, tool: str) -> dict[Path, bytes]:
    seeded = {}
    for rel, text in EXISTING[tool].items():
        path = home / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        seeded[path] = path.read_bytes()
    return seeded


def _launch(home: Path, tool: str, server: Server = SERVER, args: list[str] | None = None):
    target = Target(server=server, model=MODEL, env=_env(home))
    plan = plan_launch(TOOLS[tool], target, args or [])
    return plan, apply_plan(plan)


def _snapshot(home: Path) -> dict[str, bytes]:
    return {str(p.relative_to(home)): p.read_bytes() for p in home.rglob("*") if p.is_file()}


@pytest.mark.parametrize("tool", FILE_TOOLS)
def test_merge_keeps_the_users_settings_backs_up_and_is_idempotent(
    tmp_path: Path, tool: str
) -> None:
    seeded = _seed(tmp_path, tool)
    plan, backups = _launch(tmp_path, tool)
    changed = [c.path for c in plan.changes if not c.is_noop]
    assert changed, "the first launch writes something"
    for path in changed:
        mine = [b for b in backups if b.name.startswith(path.name + BACKUP_TAG)]
        assert len(mine) == 1
        if path in seeded:
            assert mine[0].read_bytes() == seeded[path]  # the backup is the original
    USER_KEEPS[tool](tmp_path)
    before = _snapshot(tmp_path)
    plan2, backups2 = _launch(tmp_path, tool)
    assert backups2 == [] and all(c.is_noop for c in plan2.changes)
    assert _snapshot(tmp_path) == before


@pytest.mark.parametrize("tool", FILE_TOOLS)
def test_undo_restores_byte_for_byte(tmp_path: Path, tool: str) -> None:
    seeded = _seed(tmp_path, tool)
    _launch(tmp_path, tool)
    restored = undo_tool(TOOLS[tool], _env(tmp_path))
    assert restored
    for path, original in seeded.items():
        assert path.read_bytes() == original
    assert not list(tmp_path.rglob(f"*{BACKUP_TAG}*"))
    for path in TOOLS[tool].config_paths(_env(tmp_path)):
        if path not in seeded:
            assert not path.exists()  # files omlx created are removed again


@pytest.mark.parametrize("tool", FILE_TOOLS)
def test_undo_on_a_fresh_home_removes_what_launch_created(tmp_path: Path, tool: str) -> None:
    _launch(tmp_path, tool)
    assert undo_tool(TOOLS[tool], _env(tmp_path))
    assert _snapshot(tmp_path) == {}
    assert undo_tool(TOOLS[tool], _env(tmp_path)) == []


MALFORMED = {
    "codex": (".codex/config.toml", 'model = "gpt-5"\n[model_providers\n'),
    "opencode": (".config/opencode/opencode.json", '{"provider": {"x": 1,,}}'),
    "openclaw": (".openclaw/openclaw.json", "{ agents: { defaults: }"),
    "hermes": (".hermes/config.yaml", "model:\n  default: [unclosed\n"),
    "pi": (".pi/agent/models.json", '{"providers": '),
    "claude": (".omlx/config.toml", "[agents\nmodel_aliases = 1\n"),
}


@pytest.mark.parametrize("tool", FILE_TOOLS)
def test_malformed_config_is_refused_and_left_untouched(tmp_path: Path, tool: str) -> None:
    rel, text = MALFORMED[tool]
    path = tmp_path / rel
    path.parent.mkdir(parents=True)
    path.write_text(text)
    before = _snapshot(tmp_path)
    with pytest.raises(LaunchError, match=str(path)):
        _launch(tmp_path, tool)
    assert _snapshot(tmp_path) == before


@pytest.mark.parametrize("tool", sorted(TOOLS))
def test_dry_run_renders_and_writes_nothing(tmp_path: Path, tool: str) -> None:
    if tool in EXISTING:
        _seed(tmp_path, tool)
    before = _snapshot(tmp_path)
    target = Target(server=KEYED, model=MODEL, env=_env(tmp_path))
    plan = plan_launch(TOOLS[tool], target, ["--help"])
    shown = render(plan, KEYED)
    assert _snapshot(tmp_path) == before
    text = "\n".join([*shown.diffs, shown.command, *shown.env.values()])
    assert "sk-secret-123" not in text  # the key is never printed
    assert plan.argv[0] == TOOLS[tool].binary and "--help" in plan.argv
    if tool in EXISTING:
        assert shown.diffs


def test_the_key_lives_in_the_environment_not_in_files(tmp_path: Path) -> None:
    for tool in FILE_TOOLS:
        plan, _ = _launch(tmp_path / tool, tool, server=KEYED)
        for change in plan.changes:
            assert "sk-secret-123" not in change.new
        assert "sk-secret-123" in plan.env.values()  # handed to the tool at launch


# ---------------------------------------------------------------- per-tool content


def _keeps_codex(home: Path) -> None:
    text = (home / ".codex/config.toml").read_text()
    assert text.startswith("# my codex setup\n") and 'name = "Ollama"  # local' in text
    data = tomllib.loads(text)
    assert data["model"] == "gpt-5.5" and data["model_provider"] == "openai"
    assert data["mcp_servers"]["docs"]["command"] == "docs-mcp"
    assert data["model_providers"]["omlx"] == {
        "name": "omlx",
        "base_url": "http://127.0.0.1:8123/v1",
        "wire_api": "responses",
        "requires_openai_auth": False,
    }
    profile = tomllib.loads((home / ".codex/omlx.config.toml").read_text())
    assert profile["model_provider"] == "omlx" and profile["model"] == MODEL.id
    assert profile["model_context_window"] == 8192


def _keeps_opencode(home: Path) -> None:
    path = home / ".config/opencode/opencode.jsonc"  # the existing .jsonc is the one edited
    text = path.read_text()
    assert "// my settings" in text and "// keep me" in text
    data = jsonc.loads(text)
    assert data["model"] == "anthropic/claude-sonnet-4-5" and data["theme"] == "tokyonight"
    assert data["provider"]["ollama"]["options"]["baseURL"] == "http://localhost:11434/v1"
    omlx = data["provider"]["omlx"]
    assert omlx["npm"] == "@ai-sdk/openai-compatible"
    assert omlx["options"] == {"baseURL": "http://127.0.0.1:8123/v1", "apiKey": "omlx-local"}
    card = omlx["models"][MODEL.id]
    assert card["limit"] == {"context": 8192, "output": 2048}
    assert card["modalities"] == {"input": ["text"], "output": ["text"]}
    assert not (home / ".config/opencode/opencode.json").exists()


def _keeps_openclaw(home: Path) -> None:
    text = (home / ".openclaw/openclaw.json").read_text()
    assert text.startswith("// OpenClaw config (JSON5)\n")
    data = jsonc.loads(text)
    assert data["channels"] == {"telegram": {"enabled": True}}
    assert data["models"]["providers"]["lmstudio"]["models"] == [{"id": "qwen"}]
    assert data["agents"]["defaults"]["model"] == {
        "primary": f"omlx/{MODEL.id}",
        "fallbacks": ["openai/gpt-5"],
    }
    omlx = data["models"]["providers"]["omlx"]
    assert omlx["api"] == "openai-completions" and omlx["baseUrl"] == "http://127.0.0.1:8123/v1"
    [card] = omlx["models"]
    assert card["id"] == MODEL.id and card["contextWindow"] == 8192 and card["maxTokens"] == 2048


def _keeps_hermes(home: Path) -> None:
    text = (home / ".hermes/config.yaml").read_text()
    assert text.startswith("# Hermes config\n") and "# main" in text
    data = YAML(typ="safe").load(text)
    assert data["model"] == {"default": "anthropic/claude-opus-4.6", "provider": "openrouter"}
    assert data["providers"]["local"]["default_model"] == "qwen"
    assert data["toolsets"] == ["hermes-cli"]
    omlx = data["providers"]["omlx"]
    assert omlx["api"] == "http://127.0.0.1:8123/v1" and omlx["default_model"] == MODEL.id
    assert omlx["context_length"] == 64_000  # Hermes' floor; the note says so
    assert omlx["max_tokens"] == 2048


def _keeps_pi(home: Path) -> None:
    models = json.loads((home / ".pi/agent/models.json").read_text())
    assert models["providers"]["ollama"]["models"] == [{"id": "llama3.1:8b"}]
    omlx = models["providers"]["omlx"]
    assert omlx["api"] == "openai-completions" and omlx["apiKey"] == "omlx-local"
    assert omlx["models"][0]["contextWindow"] == 8192
    settings = json.loads((home / ".pi/agent/settings.json").read_text())
    assert settings == {
        "defaultProvider": "omlx",
        "defaultModel": MODEL.id,
        "theme": "dark",
        "quietStartup": True,
    }


def _keeps_claude(home: Path) -> None:
    text = (home / ".omlx/config.toml").read_text()
    assert text.startswith("# omlx\n[server]\nport = 8123\n")
    data = tomllib.loads(text)
    assert data["agents"]["model_aliases"] == {t: MODEL.id for t in ("opus", "sonnet", "haiku")}


USER_KEEPS = {
    "codex": _keeps_codex,
    "opencode": _keeps_opencode,
    "openclaw": _keeps_openclaw,
    "hermes": _keeps_hermes,
    "pi": _keeps_pi,
    "claude": _keeps_claude,
}


def test_claude_code_environment_pins_every_tier_and_scales_small_windows() -> None:
    target = Target(server=SERVER, model=MODEL, env={"HOME": "/nowhere"})
    env = TOOLS["claude"].plan(target, []).env
    assert env["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:8123"  # the root, not /v1
    for var in (
        "ANTHROPIC_MODEL",
        "ANTHROPIC_DEFAULT_OPUS_MODEL",
        "ANTHROPIC_DEFAULT_SONNET_MODEL",
        "ANTHROPIC_DEFAULT_HAIKU_MODEL",
        "ANTHROPIC_SMALL_FAST_MODEL",
    ):
        assert env[var] == MODEL.id
    assert env["ANTHROPIC_CUSTOM_HEADERS"] == "x-omlx-context-window: 200000"
    big = ServedModel(id="big", type="llm", context_tokens=262_144, max_output_tokens=32_768)
    env = TOOLS["claude"].plan(Target(SERVER, big, {"HOME": "/nowhere"}), []).env
    assert "ANTHROPIC_CUSTOM_HEADERS" not in env


def test_copilot_is_configured_through_its_byok_environment() -> None:
    plan = TOOLS["copilot"].plan(Target(KEYED, MODEL, {"HOME": "/nowhere"}), ["-p", "hi"])
    assert plan.changes == [] and plan.argv == ["copilot", "-p", "hi"]
    assert plan.env["COPILOT_PROVIDER_BASE_URL"] == "http://127.0.0.1:8123/v1"
    assert plan.env["COPILOT_MODEL"] == MODEL.id
    assert plan.env["COPILOT_PROVIDER_API_KEY"] == "sk-secret-123"
    assert plan.env["COPILOT_PROVIDER_MAX_OUTPUT_TOKENS"] == "2048"


def test_codex_profile_goes_after_the_exec_subcommand(tmp_path: Path) -> None:
    plan = TOOLS["codex"].plan(Target(SERVER, MODEL, _env(tmp_path)), ["exec", "hi"])
    assert plan.argv == ["codex", "exec", "--profile", "omlx", "hi"]


def test_env_paths_are_honoured(tmp_path: Path) -> None:
    env = {
        "HOME": str(tmp_path / "home"),
        "CODEX_HOME": str(tmp_path / "cx"),
        "PI_CODING_AGENT_DIR": str(tmp_path / "pi"),
        "HERMES_HOME": str(tmp_path / "hm"),
        "OPENCLAW_CONFIG_PATH": str(tmp_path / "oc.json"),
        "XDG_CONFIG_HOME": str(tmp_path / "xdg"),
    }
    paths = {name: TOOLS[name].config_paths(env)[0] for name in TOOLS if name != "copilot"}
    assert paths["codex"] == tmp_path / "cx/config.toml"
    assert paths["pi"] == tmp_path / "pi/models.json"
    assert paths["hermes"] == tmp_path / "hm/config.yaml"
    assert paths["openclaw"] == tmp_path / "oc.json"
    assert paths["opencode"] == tmp_path / "xdg/opencode/opencode.json"
