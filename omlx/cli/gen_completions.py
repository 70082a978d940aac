"""Static bash/zsh/fish completion scripts generated from the Typer app.

Static scripts complete without starting Python on every TAB. Regenerate the files in
completions/ with `python -m omlx.cli.gen_completions`; `--check` fails when they are stale.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

SHELLS = ("bash", "zsh", "fish")
FILE_NAMES = {"bash": "omlx.bash", "zsh": "omlx.zsh", "fish": "omlx.fish"}
PROG = "omlx"


@dataclass(slots=True)
class Opt:
    names: list[str]
    help: str
    takes_value: bool
    choices: list[str] | None


@dataclass(slots=True)
class Cmd:
    path: str  # "omlx", "omlx cache", "omlx cache clear"
    help: str
    subcommands: list[Cmd] = field(default_factory=list)
    options: list[Opt] = field(default_factory=list)
    has_args: bool = False
    arg_choices: list[str] | None = None  # choices of the first positional argument


def command_tree() -> Cmd:
    import typer.main

    from omlx.cli.main import app

    root = typer.main.get_command(app)
    return _walk(root, PROG, None)


def _walk(command: Any, path: str, parent_ctx: Any) -> Cmd:
    ctx = type(parent_ctx)(command, parent=parent_ctx) if parent_ctx else _context(command)
    node = Cmd(path=path, help=_short(command.get_short_help_str(limit=80)))
    for p in command.params:
        if getattr(p, "hidden", False):
            continue
        if p.param_type_name == "argument":
            if not node.has_args:
                node.arg_choices = _choices(p)
            node.has_args = True
            continue
        names = [*p.opts, *p.secondary_opts]
        takes_value = not getattr(p, "is_flag", False) and not getattr(p, "count", False)
        node.options.append(Opt(names, _short(p.help or ""), takes_value, _choices(p)))
    node.options.append(Opt(["--help", "-h"], "Show this help and exit", False, None))
    if hasattr(command, "list_commands"):
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                node.subcommands.append(_walk(sub, f"{path} {name}", ctx))
    return node


def _context(command: Any) -> Any:
    from typer import _click  # Typer >= 0.20 vendors Click under this name

    return _click.Context(command)


def _choices(param: Any) -> list[str] | None:
    choices = getattr(getattr(param, "type_descriptor", None), "choices", None)
    if choices is None:
        choices = getattr(getattr(param, "type", None), "choices", None)
    if not choices:
        return None
    return [c.value if isinstance(c, Enum) else str(c) for c in choices]


def _short(text: str) -> str:
    line = " ".join(text.split())
    return line.split(". ")[0].rstrip(".")


def _all(node: Cmd) -> Iterator[Cmd]:
    yield node
    for sub in node.subcommands:
        yield from _all(sub)


def _words(node: Cmd) -> list[str]:
    """Words completed in a positional slot: subcommands, else the argument's choices."""
    return [s.path.rsplit(" ", 1)[1] for s in node.subcommands] or list(node.arg_choices or [])


def _sh_quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def _sub_transitions(root: Cmd) -> list[str]:
    return [sub.path for node in _all(root) for sub in node.subcommands]


def render_bash(root: Cmd) -> str:
    out = [
        _HEADER.format(shell="bash"),
        "_omlx() {",
        '    local cur="${COMP_WORDS[COMP_CWORD]}"',
        '    local prev="${COMP_WORDS[COMP_CWORD-1]}"',
        f'    local cmd="{PROG}" i w',
        "    for ((i = 1; i < COMP_CWORD; i++)); do",
        '        w="${COMP_WORDS[i]}"',
        '        case "$cmd $w" in',
    ]
    out.append(
        "            " + "|".join(f'"{p}"' for p in _sub_transitions(root)) + ') cmd="$cmd $w" ;;'
    )
    out += ["        esac", "    done", '    case "$cmd $prev" in']
    for node in _all(root):
        for opt in node.options:
            if not opt.takes_value:
                continue
            pats = "|".join(f'"{node.path} {n}"' for n in opt.names)
            if opt.choices:
                words = " ".join(opt.choices)
                out.append(
                    f'        {pats}) COMPREPLY=($(compgen -W "{words}" -- "$cur")); return ;;'
                )
            else:
                out.append(f"        {pats}) COMPREPLY=(); return ;;")
    out += ["    esac", '    local opts="" subs=""', '    case "$cmd" in']
    for node in _all(root):
        opts = " ".join(n for o in node.options for n in o.names)
        subs = " ".join(_words(node))
        out.append(f'        "{node.path}") opts="{opts}"; subs="{subs}" ;;')
    out += [
        "    esac",
        '    if [[ "$cur" == -* ]]; then',
        '        COMPREPLY=($(compgen -W "$opts" -- "$cur"))',
        '    elif [[ -n "$subs" ]]; then',
        '        COMPREPLY=($(compgen -W "$subs" -- "$cur"))',
        "    else",
        "        COMPREPLY=()  # arguments: fall back to file names (-o default)",
        "    fi",
        "}",
        f"complete -o default -F _omlx {PROG}",
        "",
    ]
    return "\n".join(out)


def _zsh_item(name: str, help_text: str) -> str:
    # _describe splits "name:description" at the first colon; names hold none.
    return _sh_quote(f"{name}:{help_text}")


def render_zsh(root: Cmd) -> str:
    out = [
        f"#compdef {PROG}",
        _HEADER.format(shell="zsh"),
        "_omlx() {",
        f'    local cmd="{PROG}" w i',
        "    local -a opts subs",
        "    for ((i = 2; i < CURRENT; i++)); do",
        '        w="${words[i]}"',
        '        case "$cmd $w" in',
    ]
    out.append(
        "            (" + "|".join(f'"{p}"' for p in _sub_transitions(root)) + ') cmd="$cmd $w" ;;'
    )
    out += ["        esac", "    done", '    case "$cmd ${words[CURRENT-1]}" in']
    for node in _all(root):
        for opt in node.options:
            if not opt.takes_value:
                continue
            pats = "|".join(f'"{node.path} {n}"' for n in opt.names)
            action = f"compadd -- {' '.join(opt.choices)}" if opt.choices else "_default"
            out.append(f"        ({pats}) {action}; return ;;")
    out += ["    esac", '    case "$cmd" in']
    for node in _all(root):
        opts = " ".join(_zsh_item(n, o.help) for o in node.options for n in o.names)
        items = [(s.path.rsplit(" ", 1)[1], s.help) for s in node.subcommands]
        items = items or [(c, c) for c in node.arg_choices or []]
        subs = " ".join(_zsh_item(name, text) for name, text in items)
        out.append(f'        ("{node.path}") opts=({opts}); subs=({subs}) ;;')
    out += [
        "    esac",
        '    if [[ "${words[CURRENT]}" == -* ]]; then',
        "        _describe -t options option opts",
        "    elif (( ${#subs} )); then",
        "        _describe -t commands command subs",
        "    else",
        "        _files",
        "    fi",
        "}",
        'if [[ "${zsh_eval_context[-1]}" == loadautofunc ]]; then',
        '    _omlx "$@"',
        "else",
        f"    compdef _omlx {PROG}",
        "fi",
        "",
    ]
    return "\n".join(out)


def render_fish(root: Cmd) -> str:
    out = [
        _HEADER.format(shell="fish"),
        "function __omlx_cmd",
        "    set -l cmd " + PROG,
        "    for w in (commandline -opc)[2..-1]",
        '        switch "$cmd $w"',
    ]
    out.append("            case " + " ".join(_sh_quote(p) for p in _sub_transitions(root)))
    out += [
        '                set cmd "$cmd $w"',
        "        end",
        "    end",
        "    echo $cmd",
        "end",
        f"complete -c {PROG} -f",
    ]
    for node in _all(root):
        cond = f"-n \"test (__omlx_cmd) = '{node.path}'\""
        for sub in node.subcommands:
            name = sub.path.rsplit(" ", 1)[1]
            out.append(f"complete -c {PROG} {cond} -a {name} -d {_sh_quote(sub.help)}")
        for opt in node.options:
            flags = " ".join(
                f"-l {n[2:]}" if n.startswith("--") else f"-s {n[1:]}" for n in opt.names
            )
            value = ""
            if opt.takes_value:
                value = f" -x -a {_sh_quote(' '.join(opt.choices))}" if opt.choices else " -r -F"
            out.append(f"complete -c {PROG} {cond} {flags}{value} -d {_sh_quote(opt.help)}")
        if node.arg_choices:
            words = _sh_quote(" ".join(node.arg_choices))
            out.append(f"complete -c {PROG} {cond} -a {words}")
        elif node.has_args and not node.subcommands:
            out.append(f"complete -c {PROG} {cond} -F")
    out.append("")
    return "\n".join(out)


_HEADER = (
    "# {shell} completion for omlx. Generated by `python -m omlx.cli.gen_completions`; do not edit."
)
RENDERERS: dict[str, Callable[[Cmd], str]] = {
    "bash": render_bash,
    "zsh": render_zsh,
    "fish": render_fish,
}


def render(shell: str) -> str:
    return RENDERERS[shell](command_tree())


def default_dir() -> Path:
    return Path(__file__).resolve().parents[2] / "completions"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=default_dir())
    parser.add_argument("--check", action="store_true", help="fail if the files are stale")
    args = parser.parse_args(argv)
    stale = []
    for shell in SHELLS:
        path = args.dir / FILE_NAMES[shell]
        text = render(shell)
        if args.check:
            if not path.is_file() or path.read_text() != text:
                stale.append(str(path))
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    if stale:
        print(f"stale: {', '.join(stale)}; run python -m omlx.cli.gen_completions", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
