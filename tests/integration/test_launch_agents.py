"""`omlx launch TOOL` with the real coding agents against a live `omlx serve`.

One server for all tools (the default model, SmolLM2-135M-Instruct); each agent is
installed from its registry into the test cache (tests/fixtures/agent_tools.py), run
non-interactively through `omlx launch`, and must exit 0 with an answer while the
server log shows its requests answered 200 on the endpoint the tool uses. Every run
starts from a home folder holding a config of the user's own, and `--undo` afterwards
must give those bytes back.

Agents' prompts run to thousands of tokens (Codex 4.3k): on 2 CPU cores each tool takes
tens of seconds, so the server caps completions (engine.max_output_tokens) and the tools
are asked for the smallest tool surface their CLIs offer.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from omlx.loadgen.server_process import free_port, server_process
from omlx.models.default_model import DEFAULT_MODEL_NAME
from tests.fixtures.agent_tools import AgentTools, ToolsUnavailable, install_agent_tools

pytestmark = [pytest.mark.slow, pytest.mark.realmodel, pytest.mark.timeout(900)]

QUESTION = "What is the capital of France? Answer in one word."
# Enough for a short chat answer to end on its own (Claude Code treats a reply cut at
# max_tokens as an error), small enough to bound each request on 2 cores.
MAX_OUTPUT_TOKENS = 192
RUN_TIMEOUT_S = 600


@dataclass(frozen=True, slots=True)
class Live:
    url: str
    log: Path
    tools: AgentTools


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    try:
        tools = install_agent_tools()
    except ToolsUnavailable as e:
        pytest.skip(f"coding agents cannot be installed here: {e}")
    home = tmp_path_factory.mktemp("omlx-home")
    log = home / "serve.log"
    port = free_port()
    env = {
        **os.environ,
        "OMLX_HOME": str(home),
        "OMLX_ENGINE__MAX_OUTPUT_TOKENS": str(MAX_OUTPUT_TOKENS),
    }
    cmd = [sys.executable, "-m", "omlx.cli.main", "serve", "--port", str(port)]
    with server_process(cmd, port, env=env, log_path=log, ready_timeout_s=300) as url:
        yield Live(url=url, log=log, tools=tools)


def _home(tmp_path: Path, files: dict[str, str]) -> tuple[Path, dict[str, bytes]]:
    home = tmp_path / "home"
    (home / "work").mkdir(parents=True)
    for rel, text in files.items():
        path = home / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return home, {rel: (home / rel).read_bytes() for rel in files}


def _launch(live: Live, home: Path, tool: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        "HOME": str(home),
        "PATH": live.tools.path(os.environ.get("PATH", "")),
        "OMLX_HOME": str(home / ".omlx"),
        "LANG": "C.UTF-8",
        "TERM": "dumb",
        "NO_COLOR": "1",
        "CI": "1",
    }
    cmd = [sys.executable, "-m", "omlx.cli.main", "launch", tool]
    if args and args[0] == "--undo":
        cmd.append("--undo")
    else:
        cmd += ["--url", live.url, "--model", DEFAULT_MODEL_NAME, "--", *args]
    return subprocess.run(
        cmd,
        cwd=home / "work",
        env={**env, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def _requests_since(live: Live, offset: int) -> list[tuple[str, int]]:
    text = live.log.read_bytes()[offset:].decode("utf-8", "replace")
    return [(m[1], int(m[2])) for m in re.finditer(r"POST (/\S+) model=\S+ status=(\d+)", text)]


def _served_since(live: Live, offset: int, endpoint: str, wait_s: float = 15.0) -> list[int]:
    """The statuses of `endpoint`'s requests logged since `offset`. The access line is
    written once the response has gone out, so a tool that exits on the stream's last
    event can be done before it lands (seen under CI's load): wait for one a while."""
    deadline = time.monotonic() + wait_s
    while True:
        served = [status for path, status in _requests_since(live, offset) if path == endpoint]
        if served or time.monotonic() > deadline:
            return served
        time.sleep(0.2)


# tool -> (the endpoint it uses, its non-interactive arguments, a config of the user's own)
CASES = {
    "claude": (
        "/v1/messages",
        ["-p", QUESTION, "--tools", "", "--system-prompt", "You are a helpful assistant."],
        {".omlx/config.toml": '# mine\n[agents]\nmodel_aliases = { fast = "x" }\n'},
    ),
    "codex": (
        "/v1/responses",
        # Without the multi-agent and goal tools, and with short base instructions (as
        # Claude Code's --system-prompt): Codex's own are 17k characters, whose prefill
        # took 100 of this test's 110 s on 2 cores; ~2k prompt tokens instead of 5.6k.
        [
            "exec",
            "--disable",
            "multi_agent",
            "--disable",
            "goals",
            "-c",
            "model_instructions_file=../instructions.md",
            "--skip-git-repo-check",
            QUESTION,
        ],
        {
            ".codex/config.toml": 'model = "gpt-5.5"  # mine\n',
            "instructions.md": "You are Codex, a coding agent. Answer briefly.\n",
        },
    ),
    "opencode": (
        "/v1/chat/completions",
        ["run", QUESTION],
        # No tools: OpenCode's prompt with them is 7.8k tokens of the model's 8k.
        {".config/opencode/opencode.json": '{\n  // mine\n  "tools": {"*": false}\n}\n'},
    ),
    "openclaw": (
        "/v1/chat/completions",
        ["agent", "exec", QUESTION, "--local-model-lean"],
        # The minimal tool profile: with the default one the prompt outgrows the 8k window.
        {".openclaw/openclaw.json": "// mine\n{ tools: { profile: 'minimal' } }\n"},
    ),
    "hermes": (
        "/v1/chat/completions",
        ["chat", "-q", QUESTION, "-Q", "-t", "clarify", "--ignore-rules"],
        {".hermes/config.yaml": "# mine\ndisplay:\n  compact: true\n"},
    ),
    "copilot": (
        "/v1/chat/completions",
        [
            "-p",
            QUESTION,
            "--available-tools",
            "view",
            "--disable-builtin-mcps",
            "--no-custom-instructions",
        ],
        {},
    ),
    "pi": (
        "/v1/chat/completions",
        ["-p", QUESTION, "--no-tools", "--no-skills", "--no-context-files", "--offline"],
        {".pi/agent/settings.json": '{\n  "theme": "dark"\n}\n'},
    ),
}


@pytest.mark.parametrize("tool", list(CASES))
def test_launch_runs_the_real_tool_against_omlx(live: Live, tmp_path: Path, tool: str) -> None:
    endpoint, args, mine = CASES[tool]
    home, before = _home(tmp_path, mine)
    offset = live.log.stat().st_size
    run = _launch(live, home, tool, *args)
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-4000:]
    assert run.stdout.strip(), output[-4000:]  # the model's answer
    served = _served_since(live, offset, endpoint)
    assert served, f"no {endpoint} request in the server log:\n{output[-2000:]}"
    assert set(served) == {200}, served
    undo = _launch(live, home, tool, "--undo")
    assert undo.returncode == 0, undo.stdout + undo.stderr
    for rel, original in before.items():
        assert (home / rel).read_bytes() == original, rel  # the user's config, byte for byte
