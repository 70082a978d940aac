"""OpenClaw: a `models.providers.omlx` entry (chat completions) and the agent's default model.

`openclaw.json` is JSON5; it is edited as text so the user's comments stay.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from omlx.integrations import jsonc
from omlx.integrations.files import FileChange, read_text
from omlx.integrations.tool import KEY_ENV, PROVIDER_ID, Plan, Target, Tool


def config_path(env: Mapping[str, str]) -> Path:
    if env.get("OPENCLAW_CONFIG_PATH"):
        return Path(env["OPENCLAW_CONFIG_PATH"]).expanduser()
    if env.get("OPENCLAW_STATE_DIR"):
        return Path(env["OPENCLAW_STATE_DIR"]).expanduser() / "openclaw.json"
    home = env.get("OPENCLAW_HOME") or env.get("HOME") or str(Path.home())
    return Path(home).expanduser() / ".openclaw" / "openclaw.json"


def merged_models(existing: Any, card: dict[str, Any]) -> list[dict[str, Any]]:
    """The provider's model list with `card` replacing the entry of the same id."""
    models = [m for m in existing if isinstance(m, dict)] if isinstance(existing, list) else []
    out = [card if m.get("id") == card["id"] else m for m in models]
    return out if any(m.get("id") == card["id"] for m in models) else [*out, card]


class OpenClaw(Tool):
    name = "openclaw"
    display_name = "OpenClaw"
    binary = "openclaw"
    docs_url = "https://docs.openclaw.ai/gateway/local-models"
    api = "/v1/chat/completions"

    def config_paths(self, env: Mapping[str, str]) -> list[Path]:
        return [config_path(env)]

    def is_configured(self, env: Mapping[str, str]) -> bool:
        path = config_path(env)
        text = read_text(path)
        data = jsonc.loads(text, str(path)) if text else {}
        providers = ((data or {}).get("models") or {}).get("providers") or {}
        return PROVIDER_ID in providers

    def plan(self, target: Target, args: list[str]) -> Plan:
        path = config_path(target.env)
        old = read_text(path)
        data = jsonc.loads(old, str(path)) if old and old.strip() else {}
        model = target.model
        existing = (((data.get("models") or {}).get("providers") or {}).get(PROVIDER_ID)) or {}
        card = {
            "id": model.id,
            "name": model.id,
            "reasoning": False,
            "input": ["text", "image"] if model.is_vision else ["text"],
            "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0},
            "contextWindow": model.context_tokens,
            "maxTokens": model.max_output_tokens,
        }
        entry = {
            "baseUrl": target.server.openai_base,
            # OpenClaw substitutes ${VAR} in config strings at load time.
            "apiKey": f"${{{KEY_ENV}}}" if target.has_key else target.key,
            "api": "openai-completions",
            "models": merged_models(existing.get("models"), card),
        }
        new = old
        for key, value in entry.items():
            new = jsonc.set_path(new, ["models", "providers", PROVIDER_ID, key], value, str(path))
        if (data.get("models") or {}).get("mode") is None:  # keep hosted providers available
            new = jsonc.set_path(new, ["models", "mode"], "merge", str(path))
        chosen = f"{PROVIDER_ID}/{model.id}"
        current = ((data.get("agents") or {}).get("defaults") or {}).get("model")
        if isinstance(current, str):  # the shorthand form names only the primary model
            new = jsonc.set_path(new, ["agents", "defaults", "model"], {"primary": chosen})
        else:
            new = jsonc.set_path(new, ["agents", "defaults", "model", "primary"], chosen, str(path))
        return Plan(
            changes=[FileChange(path, old, new)],
            argv=[self.binary, *args],
            env=target.key_env(),
        )
