"""Hermes Agent: a `providers.omlx` entry in `$HERMES_HOME/config.yaml` (chat completions).

The provider carries the default model, its context length and output limit; launch
selects it with `--provider omlx --model ID`, so the user's own default model stays.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from omlx.integrations.files import FileChange, read_text
from omlx.integrations.formats import yaml_loads, yaml_set
from omlx.integrations.tool import KEY_ENV, PROVIDER_ID, Plan, Target, Tool

# Hermes refuses to start an agent on a window below this (agent/model_metadata.py).
MIN_CONTEXT_TOKENS = 64_000


def config_path(env: Mapping[str, str]) -> Path:
    home = env.get("HERMES_HOME") or str(Path(env.get("HOME") or Path.home()) / ".hermes")
    return Path(home).expanduser() / "config.yaml"


class HermesAgent(Tool):
    name = "hermes"
    display_name = "Hermes Agent"
    binary = "hermes"
    docs_url = "https://hermes-agent.nousresearch.com/docs/user-guide/configuration"
    api = "/v1/chat/completions"

    def config_paths(self, env: Mapping[str, str]) -> list[Path]:
        return [config_path(env)]

    def is_configured(self, env: Mapping[str, str]) -> bool:
        path = config_path(env)
        text = read_text(path)
        data = yaml_loads(text, str(path)) if text else None
        return bool(data) and PROVIDER_ID in (data.get("providers") or {})

    def plan(self, target: Target, args: list[str]) -> Plan:
        path = config_path(target.env)
        old = read_text(path)
        model = target.model
        notes = []
        context = model.context_tokens
        if context < MIN_CONTEXT_TOKENS:
            # Hermes will not run below its floor; omlx answers a clear 400 for a prompt
            # that outgrows the real window, and clamps max_tokens to the room left.
            notes.append(
                f"{model.id} has a {context}-token window; Hermes Agent refuses windows under "
                f"{MIN_CONTEXT_TOKENS}, so it is told {MIN_CONTEXT_TOKENS}: keep sessions short"
            )
            context = MIN_CONTEXT_TOKENS
        base = ("providers", PROVIDER_ID)
        key = {("key_env",): KEY_ENV} if target.has_key else {("api_key",): target.key}
        fields = {
            ("name",): "omlx",
            ("api",): target.server.openai_base,
            **key,
            ("default_model",): model.id,
            ("context_length",): context,
            ("max_tokens",): model.max_output_tokens,
            ("models", model.id): {"context_length": context},
        }
        new = yaml_set(old, str(path), {(*base, *k): v for k, v in fields.items()})
        argv = [self.binary, *args]
        if not args or args[0] == "chat":
            rest = args[1:] if args else []
            argv = [self.binary, "chat", "--provider", PROVIDER_ID, "--model", model.id, *rest]
        # Hermes's first-run guard looks for a provider key or endpoint in the environment
        # (or a default model in config.yaml, which stays the user's): name omlx there.
        env = {
            **target.key_env(),
            "OPENAI_BASE_URL": target.server.openai_base,
            "OPENAI_API_KEY": target.key,
        }
        return Plan(changes=[FileChange(path, old, new)], argv=argv, env=env, notes=notes)
