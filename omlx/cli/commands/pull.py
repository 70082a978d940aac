"""`omlx pull`: import a GGUF, add a local folder, or download from the hub."""

from __future__ import annotations

import re
from enum import StrEnum
from pathlib import Path

import typer
from rich.table import Table

from omlx.cli.commands.models import human_bytes, open_store
from omlx.cli.output import console, fail
from omlx.errors import ImportFailed, InvalidRequest, OmlxError
from omlx.models.hub import HubFile, download, is_repo_id
from omlx.models.store import ModelEntry, ModelStore, add_folder, check_name

GGUF_PART_RE = re.compile(r"\.gguf\.part\d+$")


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
        if name is not None:
            check_name(name)
        entry = _pull_any(store, sources, name, dtype, revision, dry_run)
    except OmlxError as e:
        fail(e.message)
    if entry is not None:
        params = f", {entry.num_params:,} params" if entry.num_params else ""
        console.print(
            f"[green]added[/] {entry.name} ({entry.type.value}, {entry.architecture}{params}) "
            f"at {entry.path}",
            highlight=False,
        )


def _pull_any(
    store: ModelStore,
    sources: list[str],
    name: str | None,
    dtype: DType,
    revision: str | None,
    dry_run: bool,
) -> ModelEntry | None:
    if len(sources) == 1:
        return _pull(store, sources[0], name, dtype, revision, dry_run)
    if not all(GGUF_PART_RE.search(s) for s in sources):
        raise InvalidRequest("several sources are accepted only as the parts of one split GGUF")
    if revision or dry_run:
        raise InvalidRequest("--revision and --dry-run apply to hub repositories only")
    return _pull_gguf(store, [Path(s).expanduser() for s in sources], name, dtype)


def _pull(
    store: ModelStore,
    source: str,
    name: str | None,
    dtype: DType,
    revision: str | None,
    dry_run: bool,
) -> ModelEntry | None:
    path = Path(source).expanduser()
    is_gguf = source.endswith(".gguf") or bool(GGUF_PART_RE.search(source))
    if (revision or dry_run) and (is_gguf or path.exists()):
        raise InvalidRequest("--revision and --dry-run apply to hub repositories only")
    if is_gguf:
        return _pull_gguf(store, [path], name, dtype)
    if path.is_dir():
        return add_folder(store, path, name)
    if path.exists():
        raise InvalidRequest(f"{source}: not a .gguf file or a model folder")
    if is_repo_id(source) and not source.startswith((".", "/", "~")):
        return _pull_hub(store, source, name, revision, dry_run)
    raise InvalidRequest(
        f"{source!r} is not an existing .gguf file, a model folder, or a hub repo ORG/NAME"
    )


def _pull_gguf(store: ModelStore, paths: list[Path], name: str | None, dtype: DType) -> ModelEntry:
    for p in paths:
        if not p.is_file():
            raise InvalidRequest(f"{p}: no such file")
    path, sources = paths[0], paths
    if len(paths) == 1 and GGUF_PART_RE.search(path.name):
        # Split GGUFs (name.gguf.part00, part01, ...) are concatenated in order.
        stem = GGUF_PART_RE.sub(".gguf.part", path.name)
        sources = sorted(path.parent.glob(f"{stem}[0-9]*"))
    dest = store.primary_dir / check_name(name or gguf_model_name(path))
    from omlx.models.gguf import import_gguf

    try:
        folder = import_gguf(sources, dest, dtype=dtype.value, name=name)
    except OmlxError:
        raise
    except Exception as e:  # a malformed file surfaces as whatever the reader raised
        raise ImportFailed(f"{path}: cannot import: {type(e).__name__}: {e}") from e
    return store.resolve(str(folder))


def gguf_model_name(path: Path) -> str:
    """`SmolLM2-135M-Instruct.Q4_1.gguf` -> `SmolLM2-135M-Instruct.Q4_1`; parts lose `.partNN`."""
    stem = GGUF_PART_RE.sub("", path.name).removesuffix(".gguf")
    return re.sub(r"[^\w.-]+", "-", stem).strip(".-") or "model"


def _pull_hub(
    store: ModelStore, repo_id: str, name: str | None, revision: str | None, dry_run: bool
) -> ModelEntry | None:
    dest = store.primary_dir / (name or check_name(repo_id.split("/", 1)[1]))
    if dest.exists() and not (dest / ".cache" / "huggingface").is_dir():
        raise InvalidRequest(f"{dest} exists and is not a hub download; choose another --name")
    result = download(repo_id, dest, revision=revision, dry_run=dry_run)
    if isinstance(result, list):
        _print_dry_run(repo_id, dest, result)
        return None
    try:
        return store.resolve(dest.name)
    except OmlxError:
        raise InvalidRequest(
            f"downloaded {repo_id} to {dest}, but it is not an MLX model folder "
            "(config.json and *.safetensors); for a GGUF repo run `omlx pull FILE.gguf`"
        ) from None


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
