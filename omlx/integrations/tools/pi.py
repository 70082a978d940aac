"""Pi: a provider in `models.json` and the default provider/model in `settings.json`
(both under `$PI_CODING_AGENT_DIR`, default `~/.pi/agent`)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from omlx.integrations import jsonc
from omlx.integrations.files import FileChange, read_text
from omlx.integrations.tool import KEY_ENV, PROVIDER_ID, Plan, Target, Tool
from omlx.integrations.tools.openclaw import merged_models


def agent_dir(env: Mapping[str, str]) -> Path:
    if env.get("PI_CODING_AGENT_DIR"):
        return Path(env["PI_CODING_AGENT_DIR"]).expanduser()
    return Path(env.get("HOME") or Path.home()) / ".pi" / "agent"


class Pi(Tool):
    name = "pi"
    display_name = "Pi"
    binary = "pi"
    docs_url = "https://github.com/badlogic/pi-mono/blob/main/packages/coding-agent/docs/models.md"
    api = "/v1/chat/completions"

    def config_paths(self, env: Mapping[str, str]) -> list[Path]:
        folder = agent_dir(env)
        return [folder / "models.json", folder / "settings.json"]

    def is_configured(self, env: Mapping[str, str]) -> bool:
        models = self.config_paths(env)[0]
        text = read_text(models)
        data = jsonc.loads(text, str(models)) if text else {}
        return PROVIDER_ID in ((data or {}).get("providers") or {})

    def plan(self, target: Target, args: list[str]) -> Plan:
        models_path, settings_path = self.config_paths(target.env)
        old_models, old_settings = read_text(models_path), read_text(settings_path)
        data = jsonc.loads(old_models, str(models_path)) if old_models else {}
        model = target.model
        existing = ((data.get("providers") or {}).get(PROVIDER_ID)) or {}
        card = {
            "id": model.id,
            "name": model.id,
            "reasoning": False,
            "input": ["text", "image"] if model.is_vision else ["text"],
            "contextWindow": model.context_tokens,
            "maxTokens": model.max_output_tokens,
        }
        entry = {
            "baseUrl": target.server.openai_base,
            "api": "openai-completions",
            # Pi reads a value naming an environment variable as that variable's value.
            "apiKey": KEY_ENV if target.has_key else target.key,
            # omlx renders system prompts as `system`; reasoning effort is not an input.
            "compat": {"supportsDeveloperRole": False, "supportsReasoningEffort": False},
            "models": merged_models(existing.get("models"), card),
        }
        new_models = old_models
        for key, value in entry.items():
            new_models = jsonc.set_path(
                new_models, ["providers", PROVIDER_ID, key], value, str(models_path)
            )
        new_settings = jsonc.set_path(
            old_settings, ["defaultProvider"], PROVIDER_ID, str(settings_path)
        )
        new_settings = jsonc.set_path(new_settings, ["defaultModel"], model.id, str(settings_path))
        changes = [
            FileChange(models_path, old_models, new_models),
            FileChange(settings_path, old_settings, new_settings),
        ]
        argv = [self.binary, "--provider", PROVIDER_ID, "--model", model.id, *args]
        return Plan(changes=changes, argv=argv, env=target.key_env())
