"""The README's commands run as written for someone who followed its quick start."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"
ACTIVATE = "source .venv/bin/activate"


def _code_blocks(text: str) -> list[tuple[int, str]]:
    """(offset, body) of every fenced code block."""
    return [(m.start(), m.group(1)) for m in re.finditer(r"```[^\n]*\n(.*?)```", text, re.S)]


def test_bare_omlx_commands_come_after_the_venv_is_activated() -> None:
    """The quick start installs omlx into .venv, which is not on PATH: a later example
    that calls plain `omlx` must follow the README telling how to put it there."""
    text = README.read_text()
    bare = [
        offset
        for offset, body in _code_blocks(text)
        if any(re.match(r"\s*omlx\s", line) for line in body.splitlines())
    ]
    assert bare, "no `omlx ...` example found"
    told = text.find(ACTIVATE)
    assert 0 <= told < bare[0], f"say `{ACTIVATE}` before the first bare `omlx` example"


def test_quick_start_calls_the_venvs_omlx() -> None:
    quick_start = _code_blocks(README.read_text())[0][1]
    assert ".venv/bin/omlx serve" in quick_start
