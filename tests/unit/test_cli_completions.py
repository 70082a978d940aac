"""Completion scripts: generated from the app, shipped in completions/, never stale."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from omlx.cli.gen_completions import FILE_NAMES, SHELLS, command_tree, default_dir, main, render
from omlx.cli.main import app

REPO = Path(__file__).resolve().parents[2]


def test_shipped_scripts_are_current():
    assert default_dir() == REPO / "completions"
    assert main(["--check"]) == 0, "run: python -m omlx.cli.gen_completions"


def test_check_detects_a_stale_file(tmp_path, capsys):
    assert main(["--dir", str(tmp_path)]) == 0
    assert main(["--dir", str(tmp_path), "--check"]) == 0
    (tmp_path / FILE_NAMES["zsh"]).write_text("# old\n")
    assert main(["--dir", str(tmp_path), "--check"]) == 1
    assert "omlx.zsh" in capsys.readouterr().err


@pytest.mark.parametrize("shell", SHELLS)
def test_cli_prints_the_shipped_script(shell):
    result = CliRunner().invoke(app, ["completions", shell])
    assert result.exit_code == 0, result.output
    assert result.output == (REPO / "completions" / FILE_NAMES[shell]).read_text()


def test_cli_rejects_unknown_shell():
    result = CliRunner().invoke(app, ["completions", "tcsh"])
    assert result.exit_code != 0


@pytest.mark.parametrize("shell", SHELLS)
def test_every_command_and_option_is_in_each_script(shell):
    text = render(shell)
    tree = command_tree()
    names = [s.path.rsplit(" ", 1)[1] for s in tree.subcommands]
    assert {"serve", "pull", "models", "pin", "unpin", "cache", "config", "completions"} <= set(
        names
    )
    for name in names:
        assert name in text
    pull = next(s for s in tree.subcommands if s.path == "omlx pull")
    assert [o.names[0] for o in pull.options][:4] == [
        "--name",
        "--dtype",
        "--revision",
        "--dry-run",
    ]
    for choice in ("float32", "float16", "bfloat16", "keep"):
        assert choice in text


BASH_CASES = [
    (["omlx", "pu"], "pull"),
    (["omlx", "pull", "--d"], "--dtype --dry-run"),
    (["omlx", "pull", "--dtype", "b"], "bfloat16"),
    (["omlx", "cache", ""], "inspect clear"),
    (["omlx", "config", "s"], "show set"),
    (["omlx", "completions", ""], "bash zsh fish"),
    (["omlx", "pull", "--name", "x", "--dr"], "--dry-run"),
    (["omlx", "models", "--"], "--json --help"),
]


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize(("words", "expected"), BASH_CASES)
def test_bash_script_completes(words, expected):
    script = REPO / "completions" / FILE_NAMES["bash"]
    quoted = " ".join(f"'{w}'" for w in words)
    code = (
        f"source '{script}'; COMP_WORDS=({quoted}); COMP_CWORD={len(words) - 1}; "
        'COMPREPLY=(); _omlx; echo "${COMPREPLY[*]}"'
    )
    out = subprocess.run(["bash", "-c", code], capture_output=True, text=True, timeout=10)
    assert out.stdout.strip() == expected, out.stderr


@pytest.mark.parametrize("shell", ["zsh", "fish"])
def test_script_parses_in_its_shell(shell):
    if shutil.which(shell) is None:
        pytest.skip(f"{shell} not installed")
    script = REPO / "completions" / FILE_NAMES[shell]
    out = subprocess.run([shell, "-n", str(script)], capture_output=True, text=True, timeout=10)
    assert out.returncode == 0, out.stderr
