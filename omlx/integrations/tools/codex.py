"""Codex CLI: a `model_providers.omlx` entry (Responses API) plus an `omlx` profile file.

Codex reads providers only from `$CODEX_HOME/config.toml`; the profile file
`$CODEX_HOME/omlx.config.toml` (Codex 0.134+; `[profiles.x]` tables are no longer read)
selects that provider and the model. Plain `codex` keeps the user's own provider and
model; `codex --profile omlx` talks to omlx.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from omlx.integrations.files import FileChange, read_text
from omlx.integrations.formats import toml_loads, toml_set
from omlx.integrations.tool import KEY_ENV, PROVIDER_ID, Plan, Target, Tool

PROFILE = "omlx"


def codex_home(env: Mapping[str, str]) -> Path:
    if env.get("CODEX_HOME"):
        return Path(env["CODEX_HOME"]).expanduser()
    return Path(env.get("HOME") or Path.home()) / ".codex"


class CodexCli(Tool):
    name = "codex"
    display_name = "Codex CLI"
    binary = "codex"
    docs_url = "https://developers.openai.com/codex/config-advanced"
    api = "/v1/responses"

    def config_paths(self, env: Mapping[str, str]) -> list[Path]:
        home = codex_home(env)
        return [home / "config.toml", home / f"{PROFILE}.config.toml"]

    def is_configured(self, env: Mapping[str, str]) -> bool:
        config, profile = self.config_paths(env)
        text = read_text(config)
        if text is None or read_text(profile) is None:
            return False
        providers = toml_loads(text, str(config)).get("model_providers") or {}
        return PROVIDER_ID in providers

    def plan(self, target: Target, args: list[str]) -> Plan:
        config, profile = self.config_paths(target.env)
        provider = {
            "name": "omlx",
            "base_url": target.server.openai_base,
            "wire_api": "responses",
            "requires_openai_auth": False,
        }
        if target.has_key:
            provider["env_key"] = KEY_ENV  # the key stays in the environment, not the file
        old_config, old_profile = read_text(config), read_text(profile)
        model = target.model
        changes = [
            FileChange(
                config,
                old_config,
                toml_set(old_config, str(config), {("model_providers", PROVIDER_ID): provider}),
            ),
            FileChange(
                profile,
                old_profile,
                toml_set(
                    old_profile,
                    str(profile),
                    {
                        ("model_provider",): PROVIDER_ID,
                        ("model",): model.id,
                        ("model_context_window",): model.context_tokens,
                        # Compact before the window is full (Codex's own default is 90%).
                        ("model_auto_compact_token_limit",): model.context_tokens * 9 // 10,
                    },
                ),
            ),
        ]
        argv = [self.binary, "--profile", PROFILE, *args]
        if args and args[0] == "exec":  # a subcommand takes --profile after its name
            argv = [self.binary, "exec", "--profile", PROFILE, *args[1:]]
        return Plan(changes=changes, argv=argv, env=target.key_env())
