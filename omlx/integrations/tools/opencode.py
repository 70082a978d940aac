"""OpenCode: a `provider.omlx` entry (OpenAI-compatible SDK adapter) in its global config.

The model is chosen with `--model omlx/ID` at launch, so the user's default `model` stays.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from omlx.integrations import jsonc
from omlx.integrations.files import FileChange, read_text
from omlx.integrations.tool import KEY_ENV, PROVIDER_ID, Plan, Target, Tool

NAMES = ("opencode.jsonc", "opencode.json", "config.json")


def config_path(env: Mapping[str, str]) -> Path:
    """The file OpenCode reads: $OPENCODE_CONFIG, else the first existing global file."""
    if env.get("OPENCODE_CONFIG"):
        return Path(env["OPENCODE_CONFIG"]).expanduser()
    xdg = env.get("XDG_CONFIG_HOME") or str(Path(env.get("HOME") or Path.home()) / ".config")
    folder = Path(xdg).expanduser() / "opencode"
    for name in NAMES:
        if (folder / name).exists():
            return folder / name
    return folder / "opencode.json"


class OpenCode(Tool):
    name = "opencode"
    display_name = "OpenCode"
    binary = "opencode"
    docs_url = "https://opencode.ai/docs/providers/"
    api = "/v1/chat/completions"

    def config_paths(self, env: Mapping[str, str]) -> list[Path]:
        return [config_path(env)]

    def is_configured(self, env: Mapping[str, str]) -> bool:
        path = config_path(env)
        text = read_text(path)
        if not text:
            return False
        data = jsonc.loads(text, str(path))
        return isinstance(data, dict) and PROVIDER_ID in (data.get("provider") or {})

    def plan(self, target: Target, args: list[str]) -> Plan:
        path = config_path(target.env)
        old = read_text(path)
        model = target.model
        modalities = ["text", "image"] if model.is_vision else ["text"]
        entry = {
            "npm": "@ai-sdk/openai-compatible",
            "name": "omlx",
            "options": {
                "baseURL": target.server.openai_base,
                "apiKey": f"{{env:{KEY_ENV}}}" if target.has_key else target.key,
            },
        }
        card = {
            "name": model.id,
            "limit": {"context": model.context_tokens, "output": model.max_output_tokens},
            "modalities": {"input": modalities, "output": ["text"]},
            "tool_call": True,
        }
        new = old if old is not None else '{\n  "$schema": "https://opencode.ai/config.json"\n}\n'
        base = ["provider", PROVIDER_ID]
        for key, value in entry.items():  # key by key: models added before stay listed
            new = jsonc.set_path(new, [*base, key], value, str(path))
        new = jsonc.set_path(new, [*base, "models", model.id], card, str(path))
        argv = [self.binary, *args, "--model", f"{PROVIDER_ID}/{model.id}"]
        return Plan(changes=[FileChange(path, old, new)], argv=argv, env=target.key_env())
