"""Claude Code: environment variables only (Anthropic Messages at the server root).

Every tier (opus, sonnet, haiku, the small/fast model and subagents) is pinned to the
chosen model in the child's environment, so no Claude Code file is written. omlx's own
`agents.model_aliases` gets the tiers too, so a plain `claude` pointed at the server by
hand later resolves them the same way (from the next `omlx serve` on).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from omlx.integrations.files import FileChange, read_text
from omlx.integrations.formats import toml_set
from omlx.integrations.tool import Plan, Target, Tool

# Claude Code plans its prompts and auto-compaction for a window this large.
ASSUMED_CONTEXT_TOKENS = 200_000
# The header omlx's Anthropic route reads to scale reported token counts per request.
CONTEXT_HEADER = "x-omlx-context-window"
TIERS = ("opus", "sonnet", "haiku")


def omlx_config_path(env: Mapping[str, str]) -> Path:
    if env.get("OMLX_CONFIG"):
        return Path(env["OMLX_CONFIG"]).expanduser()
    home = env.get("OMLX_HOME") or str(Path(env.get("HOME") or Path.home()) / ".omlx")
    return Path(home).expanduser() / "config.toml"


class ClaudeCode(Tool):
    name = "claude"
    display_name = "Claude Code"
    binary = "claude"
    docs_url = "https://code.claude.com/docs/en/env-vars"
    api = "/v1/messages"

    def config_paths(self, env: Mapping[str, str]) -> list[Path]:
        return [omlx_config_path(env)]

    def is_configured(self, env: Mapping[str, str]) -> bool:
        text = read_text(omlx_config_path(env)) or ""
        return "model_aliases" in text and all(t in text for t in TIERS)

    def plan(self, target: Target, args: list[str]) -> Plan:
        model = target.model
        path = omlx_config_path(target.env)
        old = read_text(path)
        aliases = {tier: model.id for tier in TIERS}
        new = toml_set(
            old, str(path), {("agents", "model_aliases", tier): m for tier, m in aliases.items()}
        )
        env = {
            "ANTHROPIC_BASE_URL": target.server.root,
            # Bearer auth: Claude Code asks before using an ANTHROPIC_API_KEY interactively.
            "ANTHROPIC_AUTH_TOKEN": target.key,
            "ANTHROPIC_MODEL": model.id,
            "ANTHROPIC_DEFAULT_OPUS_MODEL": model.id,
            "ANTHROPIC_DEFAULT_SONNET_MODEL": model.id,
            "ANTHROPIC_DEFAULT_HAIKU_MODEL": model.id,
            "ANTHROPIC_SMALL_FAST_MODEL": model.id,
            "CLAUDE_CODE_SUBAGENT_MODEL": model.id,
            "CLAUDE_CODE_MAX_OUTPUT_TOKENS": str(model.max_output_tokens),
            # No telemetry, update checks or other calls to hosted services.
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        }
        notes = []
        if model.context_tokens < ASSUMED_CONTEXT_TOKENS:
            # Counts scaled by 200k / window: Claude Code compacts when the real window fills.
            env["ANTHROPIC_CUSTOM_HEADERS"] = f"{CONTEXT_HEADER}: {ASSUMED_CONTEXT_TOKENS}"
            # Claude Code assumes 1M tokens for a model id it does not know: plan for 200k.
            env["CLAUDE_CODE_AUTO_COMPACT_WINDOW"] = str(ASSUMED_CONTEXT_TOKENS)
            notes.append(
                f"context scaling on: {model.id} has {model.context_tokens} tokens, Claude Code "
                f"assumes {ASSUMED_CONTEXT_TOKENS}; omlx reports counts scaled to match"
            )
        changes = [FileChange(path, old, new)]
        return Plan(changes=changes, argv=[self.binary, *args], env=env, notes=notes)
