"""`omlx pull` without the terminal: import a GGUF, add a local folder, or download from the
hub into the store, reporting progress to a callback. The CLI and the web admin share it.
"""

from __future__ import annotations

import multiprocessing
import re
from collections.abc import Callable
from pathlib import Path

from omlx.errors import ImportFailed, InvalidRequest, OmlxError
from omlx.models.hub import HubFile, download, is_repo_id
from omlx.models.store import ModelEntry, ModelStore, add_folder, check_name
from omlx.schemas.models import ImportProgress

GGUF_PART_RE = re.compile(r"\.gguf\.part\d+$")
DTYPES = ("float32", "float16", "bfloat16", "keep")

Progress = Callable[[ImportProgress], None]


def _quiet(_: ImportProgress) -> None:
    return None


def pull_model(
    store: ModelStore,
    sources: list[str],
    *,
    name: str | None = None,
    dtype: str = "float32",
    revision: str | None = None,
    dry_run: bool = False,
    progress: Progress | None = None,
    gguf_in_child: bool = False,
) -> ModelEntry | list[HubFile]:
    """Add a model to the store; a dry run of a hub repo returns the files it would fetch.

    `gguf_in_child`: convert a GGUF in a child process (a server keeps MLX off its own
    threads; the conversion allocates MLX arrays).
    """
    if name is not None:
        check_name(name)
    if dtype not in DTYPES:
        raise InvalidRequest(f"dtype must be one of {', '.join(DTYPES)}", param="dtype")
    report = progress or _quiet
    if len(sources) == 1:
        return _pull(store, sources[0], name, dtype, revision, dry_run, report, gguf_in_child)
    if not all(GGUF_PART_RE.search(s) for s in sources):
        raise InvalidRequest("several sources are accepted only as the parts of one split GGUF")
    if revision or dry_run:
        raise InvalidRequest("--revision and --dry-run apply to hub repositories only")
    paths = [Path(s).expanduser() for s in sources]
    return _pull_gguf(store, paths, name, dtype, report, gguf_in_child)


def _pull(
    store: ModelStore,
    source: str,
    name: str | None,
    dtype: str,
    revision: str | None,
    dry_run: bool,
    report: Progress,
    gguf_in_child: bool,
) -> ModelEntry | list[HubFile]:
    path = Path(source).expanduser()
    is_gguf = source.endswith(".gguf") or bool(GGUF_PART_RE.search(source))
    if (revision or dry_run) and (is_gguf or path.exists()):
        raise InvalidRequest("--revision and --dry-run apply to hub repositories only")
    if is_gguf:
        return _pull_gguf(store, [path], name, dtype, report, gguf_in_child)
    if path.is_dir():
        report(ImportProgress(phase="linking"))
        return add_folder(store, path, name)
    if path.exists():
        raise InvalidRequest(f"{source}: not a .gguf file or a model folder")
    if is_repo_id(source) and not source.startswith((".", "/", "~")):
        return _pull_hub(store, source, name, revision, dry_run, report)
    raise InvalidRequest(
        f"{source!r} is not an existing .gguf file, a model folder, or a hub repo ORG/NAME"
    )


def _pull_gguf(
    store: ModelStore,
    paths: list[Path],
    name: str | None,
    dtype: str,
    report: Progress,
    gguf_in_child: bool,
) -> ModelEntry:
    for p in paths:
        if not p.is_file():
            raise InvalidRequest(f"{p}: no such file")
    path, sources = paths[0], paths
    if len(paths) == 1 and GGUF_PART_RE.search(path.name):
        # Split GGUFs (name.gguf.part00, part01, ...) are concatenated in order.
        stem = GGUF_PART_RE.sub(".gguf.part", path.name)
        sources = sorted(path.parent.glob(f"{stem}[0-9]*"))
    dest = store.primary_dir / check_name(name or gguf_model_name(path))
    report(ImportProgress(phase="converting"))
    try:
        if gguf_in_child:
            folder = _import_in_child(sources, dest, dtype, name)
        else:
            from omlx.models.gguf import import_gguf

            folder = import_gguf(sources, dest, dtype=dtype, name=name)
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
    store: ModelStore,
    repo_id: str,
    name: str | None,
    revision: str | None,
    dry_run: bool,
    report: Progress,
) -> ModelEntry | list[HubFile]:
    dest = store.primary_dir / (name or check_name(repo_id.split("/", 1)[1]))
    if dest.exists() and not (dest / ".cache" / "huggingface").is_dir():
        raise InvalidRequest(f"{dest} exists and is not a hub download; choose another --name")
    report(ImportProgress(phase="resolving"))

    def on_bytes(done: int, total: int | None) -> None:
        report(ImportProgress(phase="downloading", done=done, total=total))

    result = download(repo_id, dest, revision=revision, dry_run=dry_run, on_bytes=on_bytes)
    if isinstance(result, list):
        return result
    try:
        return store.resolve(dest.name)
    except OmlxError:
        raise InvalidRequest(
            f"downloaded {repo_id} to {dest}, but it is not an MLX model folder "
            "(config.json and *.safetensors); for a GGUF repo run `omlx pull FILE.gguf`"
        ) from None


def _import_in_child(sources: list[Path], dest: Path, dtype: str, name: str | None) -> Path:
    """import_gguf in a fresh interpreter (spawn): MLX stays out of the calling process."""
    ctx = multiprocessing.get_context("spawn")
    receive, send = ctx.Pipe(duplex=False)
    child = ctx.Process(
        target=_child_import, args=(send, [str(p) for p in sources], str(dest), dtype, name)
    )
    child.start()
    send.close()
    try:
        outcome = receive.recv()
    except EOFError:
        outcome = ("error", f"the import process died (exit code {child.exitcode})")
    child.join()
    kind, value = outcome
    if kind == "error":
        raise ImportFailed(value)
    return Path(value)


def _child_import(send, sources: list[str], dest: str, dtype: str, name: str | None) -> None:
    from omlx.models.gguf import import_gguf

    try:
        folder = import_gguf([Path(s) for s in sources], Path(dest), dtype=dtype, name=name)
        send.send(("ok", str(folder)))
    except OmlxError as e:
        send.send(("error", e.message))
    except Exception as e:
        send.send(("error", f"{sources[0]}: cannot import: {type(e).__name__}: {e}"))
    finally:
        send.close()
