"""The `omlx` Typer app: every subcommand is registered here, bodies live in commands/."""

from __future__ import annotations

import sys

import typer

import omlx
from omlx.cli.commands import (
    bench,
    cache,
    completions,
    config,
    dflash_bench,
    draft,
    launch,
    models,
    pull,
    serve,
    top,
)
from omlx.platform.blas import reexec_with_blas
from omlx.platform.kernel_cache import persist_kernel_cache
from omlx.settings import omlx_home

app = typer.Typer(
    name="omlx",
    help="omlx: a fast LLM inference server and toolchain built on MLX.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Click hands these to every subcommand's context, so `-h` works everywhere.
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"omlx {omlx.__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False,
        "--version",
        "-V",
        callback=_print_version,
        is_eager=True,
        help="Print the version and exit.",
    ),
) -> None:
    """omlx: a fast LLM inference server and toolchain built on MLX."""


app.command("serve")(serve.serve)
app.command("pull")(pull.pull)
app.command("models")(models.list_models)
app.command("pin")(models.pin)
app.command("unpin")(models.unpin)
app.command("bench")(bench.bench)
app.add_typer(cache.app, name="cache")
app.command("dflash-bench")(dflash_bench.dflash_bench)
app.add_typer(draft.app, name="draft")
app.command("top")(top.top)
app.add_typer(config.app, name="config")
app.command("completions")(completions.completions)
app.add_typer(launch.app, name="launch")


def main() -> None:
    # Before anything imports MLX: on Linux CPU, re-exec once on OpenBLAS (OMLX_BLAS=off: no).
    # Not for `omlx launch`: it runs no MLX, and the agents it execs (Node programs) must
    # not inherit an LD_PRELOAD of OpenBLAS.
    if sys.argv[1:2] != ["launch"]:
        reexec_with_blas()
        persist_kernel_cache(omlx_home())
    app()


if __name__ == "__main__":
    main()
