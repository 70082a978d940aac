"""The integrations page: one card per agent tool that `omlx launch TOOL` sets up.

What each tool talks to and where its configuration lives; the page shows the command.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Tool:
    id: str  # the TOOL of `omlx launch TOOL`
    name: str
    api: str  # the omlx API it uses
    configured_in: str

    @property
    def command(self) -> str:
        return f"omlx launch {self.id}"


TOOLS = [
    Tool("claude", "Claude Code", "Anthropic Messages", "ANTHROPIC_BASE_URL and model variables"),
    Tool("codex", "Codex CLI", "OpenAI Responses", "~/.codex/config.toml"),
    Tool("opencode", "OpenCode", "OpenAI Chat Completions", "~/.config/opencode/opencode.json"),
    Tool("openclaw", "OpenClaw", "OpenAI Chat Completions", "~/.openclaw/openclaw.json"),
    Tool("hermes", "Hermes Agent", "OpenAI Chat Completions", "~/.hermes/config.yaml"),
    Tool("copilot", "GitHub Copilot CLI", "OpenAI Responses", "COPILOT_PROVIDER_* variables"),
    Tool("pi", "Pi", "OpenAI Chat Completions", "~/.pi/agent/models.json"),
]
