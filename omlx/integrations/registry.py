"""The integrations omlx knows, in the order they are listed."""

from __future__ import annotations

from omlx.integrations.tool import Tool, ToolInfo
from omlx.integrations.tools.claude import ClaudeCode
from omlx.integrations.tools.codex import CodexCli
from omlx.integrations.tools.copilot import CopilotCli
from omlx.integrations.tools.hermes import HermesAgent
from omlx.integrations.tools.openclaw import OpenClaw
from omlx.integrations.tools.opencode import OpenCode
from omlx.integrations.tools.pi import Pi

TOOLS: dict[str, Tool] = {
    t.name: t
    for t in (ClaudeCode(), CodexCli(), OpenCode(), OpenClaw(), HermesAgent(), CopilotCli(), Pi())
}


def get_tool(name: str) -> Tool:
    try:
        return TOOLS[name]
    except KeyError:
        raise KeyError(f"unknown tool {name!r}; one of: {', '.join(TOOLS)}") from None


def tool_infos() -> list[ToolInfo]:
    return [t.info() for t in TOOLS.values()]


def tool_listing() -> list[dict[str, str]]:
    """Plain data for each tool: name, display_name, binary, docs_url, api, command."""
    return [
        {
            "name": i.name,
            "display_name": i.display_name,
            "binary": i.binary,
            "docs_url": i.docs_url,
            "api": i.api,
            "command": i.command,
        }
        for i in tool_infos()
    ]
