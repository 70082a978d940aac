"""`omlx launch`: point coding agents (Claude Code, Codex, OpenCode, OpenClaw, Hermes Agent,
Copilot CLI, Pi) at a running omlx server by merging into each tool's own config.

Plain Python: no MLX, no server internals; the server is reached over HTTP only.
`tool_listing()` is the plain-data view other front ends (the web admin) show.
"""

from __future__ import annotations

from omlx.integrations.registry import TOOLS, get_tool, tool_infos, tool_listing

__all__ = ["TOOLS", "get_tool", "tool_infos", "tool_listing"]
