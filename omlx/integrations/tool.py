"""What every integration provides: where its config lives, what it writes, how it runs."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from omlx.integrations.files import FileChange
from omlx.integrations.server import ServedModel, Server

# What tools send as the key when the server has none: omlx accepts any key then.
PLACEHOLDER_KEY = "omlx-local"
# The variable a launched tool reads the real key from; configs name it, never hold it.
KEY_ENV = "OMLX_API_KEY"
PROVIDER_ID = "omlx"


@dataclass(frozen=True, slots=True)
class Target:
    """The server and model a tool is pointed at, and the user's environment."""

    server: Server
    model: ServedModel
    env: Mapping[str, str]

    @property
    def has_key(self) -> bool:
        return bool(self.server.api_key)

    @property
    def key(self) -> str:
        return self.server.api_key or PLACEHOLDER_KEY

    @property
    def home(self) -> Path:
        return Path(self.env.get("HOME") or Path.home())

    def key_env(self) -> dict[str, str]:
        """`OMLX_API_KEY` for the child when configs refer to it."""
        return {KEY_ENV: self.server.api_key} if self.has_key else {}


@dataclass(frozen=True, slots=True)
class Plan:
    """What launching a tool means: files to change, then a command with extra variables."""

    changes: list[FileChange]
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class ToolInfo:
    """Plain data about a tool (what the admin's Integrations card shows)."""

    name: str
    display_name: str
    binary: str
    docs_url: str
    api: str  # the omlx endpoint the tool talks to
    command: str  # what a user types


class Tool:
    """One coding agent. Subclasses set the class attributes and implement `plan`."""

    name: str = ""
    display_name: str = ""
    binary: str = ""
    docs_url: str = ""
    api: str = ""

    def info(self) -> ToolInfo:
        return ToolInfo(
            name=self.name,
            display_name=self.display_name,
            binary=self.binary,
            docs_url=self.docs_url,
            api=self.api,
            command=f"omlx launch {self.name}",
        )

    def config_paths(self, env: Mapping[str, str]) -> list[Path]:
        """Files `plan` may write (and `--undo` restores); empty for env-only tools."""
        return []

    def is_configured(self, env: Mapping[str, str]) -> bool | None:
        """Whether the tool's config holds an omlx provider; None for tools configured
        only through the environment at launch."""
        return None

    def plan(self, target: Target, args: list[str]) -> Plan:
        raise NotImplementedError

    def find(self, env: Mapping[str, str]) -> str | None:
        return shutil.which(self.binary, path=env.get("PATH"))

    def version(self, env: Mapping[str, str], timeout_s: float = 20.0) -> str | None:
        """`TOOL --version`'s first line, or None when it is not installed or fails."""
        path = self.find(env)
        if path is None:
            return None
        try:
            out = subprocess.run(
                [path, "--version"],
                capture_output=True,
                text=True,
                timeout=timeout_s,
                env=dict(env),
                stdin=subprocess.DEVNULL,
            )
        except (OSError, subprocess.TimeoutExpired):
            return "unknown"
        lines = (out.stdout or out.stderr).strip().splitlines()
        return lines[0].strip() if lines else "unknown"


def home_of(env: Mapping[str, str]) -> Path:
    return Path(env.get("HOME") or Path.home())
