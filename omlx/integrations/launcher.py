"""The steps of `omlx launch` that need no terminal: pick the model, plan, apply, undo."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from omlx.integrations import files
from omlx.integrations.files import ConfigError
from omlx.integrations.server import ServedModel, Server
from omlx.integrations.tool import Plan, Target, Tool

MASK = "****"


class LaunchError(Exception):
    """A launch that cannot go on; the message says what to do."""


def match_model(name: str, models: list[ServedModel]) -> ServedModel:
    """The served model called `name` (its id, or the last part of an `org/name` id)."""
    for m in models:
        if m.id == name:
            return m
    tail = [m for m in models if m.id.rsplit("/", 1)[-1] == name]
    if len(tail) == 1:
        return tail[0]
    choices = ", ".join(m.id for m in models) or "none"
    raise LaunchError(f"model {name!r} is not served here; text and vision models: {choices}")


def plan_launch(tool: Tool, target: Target, args: list[str]) -> Plan:
    try:
        return tool.plan(target, args)
    except ConfigError as e:
        raise LaunchError(str(e)) from None


def apply_plan(plan: Plan) -> list[Path]:
    """Back up and write the plan's files; returns the backups (none when nothing changed)."""
    return files.apply(plan.changes)


def undo_tool(tool: Tool, env: Mapping[str, str]) -> list[tuple[Path, Path]]:
    """Restore each of the tool's files from its newest backup: (file, backup used)."""
    restored = []
    for path in tool.config_paths(env):
        backup = files.undo(path)
        if backup is not None:
            restored.append((path, backup))
    return restored


def masked(text: str, secret: str) -> str:
    return text.replace(secret, MASK) if secret else text


@dataclass(frozen=True, slots=True)
class Rendered:
    """A plan as text a person or a script reads, with the API key masked."""

    diffs: list[str]
    command: str
    env: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def render(plan: Plan, server: Server) -> Rendered:
    secret = server.api_key
    return Rendered(
        diffs=[masked(c.diff(), secret) for c in plan.changes if not c.is_noop],
        command=masked(shlex.join(plan.argv), secret),
        env={k: masked(v, secret) for k, v in plan.env.items()},
        notes=list(plan.notes),
    )


@dataclass(frozen=True, slots=True)
class ToolStatus:
    name: str
    display_name: str
    installed: bool
    version: str | None
    configured: bool | None  # None: configured through the environment at launch
    config_paths: list[str]
    config_error: str | None = None


def tool_status(tool: Tool, env: Mapping[str, str]) -> ToolStatus:
    version = tool.version(env)
    error = None
    try:
        configured = tool.is_configured(env)
    except ConfigError as e:
        configured, error = False, str(e)
    return ToolStatus(
        name=tool.name,
        display_name=tool.display_name,
        installed=version is not None,
        version=version,
        configured=configured,
        config_paths=[str(p) for p in tool.config_paths(env)],
        config_error=error,
    )
