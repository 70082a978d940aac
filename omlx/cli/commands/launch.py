"""`omlx launch TOOL` and `omlx launch list`: point a coding agent at the running server."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from dataclasses import asdict
from typing import Any, NoReturn

import typer
from rich.table import Table

from omlx.cli.output import console, err_console
from omlx.integrations import TOOLS
from omlx.integrations.launcher import (
    LaunchError,
    Rendered,
    apply_plan,
    match_model,
    plan_launch,
    render,
    tool_status,
    undo_tool,
)
from omlx.integrations.server import ServedModel, Server, ServerError, local_url, server_root
from omlx.integrations.tool import Target, Tool
from omlx.settings import SettingsError, load_settings

app = typer.Typer(
    help="Point a coding agent at the running omlx server, then run it.",
    no_args_is_help=True,
)
PASS_THROUGH = {"allow_extra_args": True, "ignore_unknown_options": True}


def _fail(message: str, as_json: bool, **extra: Any) -> NoReturn:
    if as_json:
        print(json.dumps({"error": message, **extra}, indent=2))
    else:
        err_console.print(f"[bold red]error:[/] {message}", highlight=False)
    raise typer.Exit(1)


@app.command("list")
def list_tools(
    as_json: bool = typer.Option(False, "--json", help="Print JSON for scripts."),
) -> None:
    """Each tool: installed and its version, configured for omlx or not, config files."""
    statuses = [tool_status(t, os.environ) for t in TOOLS.values()]
    if as_json:
        print(json.dumps([asdict(s) for s in statuses], indent=2))
        return
    table = Table(title="omlx launch: coding agents")
    for col in ("tool", "name", "installed", "configured for omlx", "config"):
        table.add_column(col, overflow="fold")
    for s in statuses:
        installed = s.version or "yes" if s.installed else "no"
        configured = {True: "yes", False: "no", None: "at launch (environment)"}[s.configured]
        if s.config_error:
            configured = "config unreadable"
        table.add_row(s.name, s.display_name, installed, configured, "\n".join(s.config_paths))
    console.print(table)


def _server(url: str, as_json: bool) -> Server:
    try:
        settings = load_settings().settings.server
    except SettingsError as e:
        _fail(str(e), as_json)
    root = server_root(url) if url else local_url(settings.host, settings.port)
    return Server(root=root, api_key=settings.api_key)


def _pick(models: list[ServedModel], as_json: bool) -> ServedModel:
    """A numbered picker on a terminal; without one, an error that lists the choices."""
    choices = [{"id": m.id, "type": m.type, "context_tokens": m.context_tokens} for m in models]
    if not models:
        _fail("the server has no text or vision model to launch with", as_json)
    if as_json or not sys.stdin.isatty():
        _fail("no --model given and no terminal to pick one: pass --model", as_json, models=choices)
    table = Table(title="models on the server")
    for col in ("#", "model", "type", "context", "state"):
        table.add_column(col)
    for i, m in enumerate(models, 1):
        table.add_row(str(i), m.id, m.type, f"{m.context_tokens:,}", m.state)
    console.print(table)
    n = typer.prompt("model number", type=int, default=1)
    if not 1 <= n <= len(models):
        _fail(f"pick a number from 1 to {len(models)}", as_json)
    return models[n - 1]


def _print(rendered: Rendered, as_json: bool, what: str) -> None:
    if as_json:
        print(json.dumps({"status": what, **asdict(rendered)}, indent=2))
        return
    for note in rendered.notes:
        err_console.print(f"[yellow]note:[/] {note}", highlight=False)
    for diff in rendered.diffs:
        console.print(diff, highlight=False, markup=False, end="")
    if what == "dry-run" and not rendered.diffs:
        console.print("(no file changes: the config is already set)")
    env = " ".join(f"{k}={v}" for k, v in rendered.env.items())
    console.print(
        f"{env} {rendered.command}".strip(), highlight=False, markup=False, soft_wrap=True
    )


def _launch(tool: Tool) -> Callable[..., None]:
    def command(
        ctx: typer.Context,
        model: str = typer.Option("", "--model", "-m", help="Model id (default: pick one)."),
        url: str = typer.Option("", help="Server URL (default: server.host/port in settings)."),
        dry_run: bool = typer.Option(False, "--dry-run", help="Print the diff; write nothing."),
        no_exec: bool = typer.Option(
            False, "--no-exec", help="Write the config, print the command instead of running it."
        ),
        undo: bool = typer.Option(False, "--undo", help="Restore the config from its backup."),
        as_json: bool = typer.Option(False, "--json", help="Print JSON for scripts."),
    ) -> None:
        env = dict(os.environ)
        if undo:
            restored = undo_tool(tool, env)
            if as_json:
                print(json.dumps([{"file": str(p), "backup": str(b)} for p, b in restored]))
            for path, backup in restored:
                console.print(f"restored {path} from {backup.name}", highlight=False)
            if not restored and not as_json:
                console.print(f"no omlx backup of {tool.display_name}'s config to restore")
            return
        server = _server(url, as_json)
        try:
            server.check_health()
            models = server.chat_models()
            chosen = match_model(model, models) if model else _pick(models, as_json)
            plan = plan_launch(tool, Target(server, chosen, env), list(ctx.args))
        except (ServerError, LaunchError) as e:
            _fail(str(e), as_json)
        rendered = render(plan, server)
        if dry_run:
            _print(rendered, as_json, "dry-run")
            return
        backups = apply_plan(plan)
        if no_exec:
            _print(rendered, as_json, "configured")
            return
        for note in rendered.notes:
            err_console.print(f"[yellow]note:[/] {note}", highlight=False)
        if backups:
            err_console.print(
                f"configured {tool.display_name}; backups: " + ", ".join(str(b) for b in backups),
                highlight=False,
            )
        _exec(plan.argv, {**env, **plan.env}, tool, as_json)

    command.__doc__ = (
        f"Point {tool.display_name} at omlx ({tool.api}) and run it; "
        "arguments after -- go to the tool."
    )
    return command


def _exec(argv: list[str], env: dict[str, str], tool: Tool, as_json: bool) -> NoReturn:
    path = tool.find(env)
    if path is None:
        _fail(f"{tool.binary!r} is not on PATH; install {tool.display_name} first", as_json)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(path, [path, *argv[1:]], env)


for _tool in TOOLS.values():
    app.command(_tool.name, context_settings=PASS_THROUGH)(_launch(_tool))
