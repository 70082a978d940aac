"""`omlx pull`: import a GGUF, add a local folder, or download from the hub."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path

import typer
from rich.table import Table

from omlx.cli.commands.models import human_bytes, open_store
from omlx.cli.output import console, fail
from omlx.errors import OmlxError
from omlx.models.hub import HubFile
from omlx.models.pull import pull_model


class DType(StrEnum):
    float32 = "float32"
    float16 = "float16"
    bfloat16 = "bfloat16"
    keep = "keep"


def pull(
    sources: list[str] = typer.Argument(
        ...,
        metavar="SOURCE",
        help="A .gguf file (split GGUFs: every .gguf.partNN in order, or the first to find"
        " its siblings), a model folder, or a hub repo ORG/NAME.",
    ),
    name: str | None = typer.Option(None, "--name", help="Name in the store (default: derived)."),
    dtype: DType = typer.Option(
        DType.float32,
        "--dtype",
        help="GGUF only: weight dtype; `keep` leaves Q4_0/Q4_1/Q8_0 quantized (best on GPU).",
    ),
    revision: str | None = typer.Option(
        None, "--revision", help="Hub only: branch, tag or commit (default: main)."
    ),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Hub only: list the files and sizes, download nothing."
    ),
) -> None:
    """Add a model to the store ($OMLX_HOME/models): import, register or download it.

    Examples: `omlx pull SmolLM2.Q4_1.gguf --dtype keep`, `omlx pull ~/models/my-model`
    (added as a symlink), `omlx pull mlx-community/Qwen3-0.6B-4bit --dry-run`.
    """
    store = open_store()
    try:
        entry = pull_model(
            store, sources, name=name, dtype=dtype.value, revision=revision, dry_run=dry_run
        )
    except OmlxError as e:
        fail(e.message)
    if isinstance(entry, list):
        dest = store.primary_dir / (name or sources[0].split("/", 1)[1])
        _print_dry_run(sources[0], dest, entry)
    else:
        params = f", {entry.num_params:,} params" if entry.num_params else ""
        console.print(
            f"[green]added[/] {entry.name} ({entry.type.value}, {entry.architecture}{params}) "
            f"at {entry.path}",
            highlight=False,
        )


def _print_dry_run(repo_id: str, dest: Path, files: list[HubFile]) -> None:
    table = Table(title=f"{repo_id} -> {dest} (dry run)")
    for col in ("file", "size", "action"):
        table.add_column(col)
    for f in files:
        size = human_bytes(f.size_bytes) if f.size_bytes is not None else "?"
        table.add_row(f.name, size, "download" if f.will_download else "up to date")
    console.print(table)
    total = sum(f.size_bytes or 0 for f in files if f.will_download)
    console.print(f"{len(files)} files; would download {human_bytes(total)} ({total} bytes)")
