"""The model store: model folders under the model directories and the Hugging Face cache."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from omlx.errors import InvalidRequest, ModelNotFound
from omlx.models.types import (
    ModelType,
    NotAModelFolder,
    inspect_model,
    is_model_folder,
)
from omlx.settings import hf_hub_cache, omlx_home

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ModelEntry:
    name: str
    path: Path
    type: ModelType
    architecture: str
    num_params: int | None
    size_bytes: int
    quantization: str | None
    context_length: int | None
    pinned: bool = False
    source: str = "local"  # "local" (a model directory) or "hf-cache"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["path"] = str(self.path)
        d["type"] = self.type.value
        return d


def default_models_dir() -> Path:
    return omlx_home() / "models"


class ModelStore:
    """Finds model folders; cheap to build, scans on `list()`."""

    def __init__(
        self,
        dirs: Sequence[Path] | None = None,
        *,
        hf_cache: Path | None = None,
        scan_hf_cache: bool = True,
        pinned: Iterable[str] = (),
    ) -> None:
        self.dirs = list(dirs) if dirs is not None else [default_models_dir()]
        self.hf_cache = hf_cache if hf_cache is not None else hf_hub_cache()
        self.scan_hf_cache = scan_hf_cache
        self.pinned = set(pinned)

    @classmethod
    def from_settings(cls, models: Any) -> ModelStore:
        """Build from a `ModelSettings` section: the default dir first, then `models.dirs`."""
        dirs = [default_models_dir(), *(Path(d).expanduser() for d in models.dirs)]
        return cls(
            list(dict.fromkeys(dirs)), scan_hf_cache=models.scan_hf_cache, pinned=models.pinned
        )

    @property
    def primary_dir(self) -> Path:
        """Where pulls and imports land."""
        return self.dirs[0]

    def list(self) -> list[ModelEntry]:
        found: dict[str, ModelEntry] = {}
        candidates = [(n, p, "local") for d in self.dirs for n, p in _scan_dir(d)]
        if self.scan_hf_cache:
            candidates += [(n, p, "hf-cache") for n, p in _scan_hf_cache(self.hf_cache)]
        for name, path, source in candidates:
            # The first directory wins a name clash, as PATH does.
            if name in found:
                continue
            entry = self._entry(name, path, source)
            if entry is not None:
                found[name] = entry
        return sorted(found.values(), key=lambda e: e.name.lower())

    def _entry(self, name: str, path: Path, source: str) -> ModelEntry | None:
        try:
            info = inspect_model(path, name=name)
        except (NotAModelFolder, OSError) as e:
            log.warning("skipping %s: %s", path, e)
            return None
        return ModelEntry(
            name=name,
            path=path,
            type=info.type,
            architecture=info.architecture,
            num_params=info.num_params,
            size_bytes=info.size_bytes,
            quantization=info.quantization,
            context_length=info.context_length,
            pinned=name in self.pinned,
            source=source,
        )

    def resolve(self, name: str, *, allow_paths: bool = True) -> ModelEntry:
        """By exact name, a unique case-insensitive name or `/`-suffix match, or (when
        `allow_paths`: the CLI, never an HTTP request unless configured) a folder path."""
        entries = self.list()
        for e in entries:
            if e.name == name:
                return e
        lowered = name.lower()
        matches = [e for e in entries if e.name.lower() == lowered]
        if not matches:
            matches = [e for e in entries if e.name.lower().endswith("/" + lowered)]
        if len(matches) == 1:
            return matches[0]
        if len(matches) > 1:
            names = ", ".join(e.name for e in matches)
            raise ModelNotFound(f"model {name!r} is ambiguous: it matches {names}", param="model")
        if allow_paths:
            path = Path(name).expanduser()
            if is_model_folder(path):
                entry = self._entry(path.resolve().name, path.resolve(), "path")
                if entry is not None:
                    return entry
        elif looks_like_path(name):
            # Said without looking at the disk: the answer must not tell which folders exist.
            raise ModelNotFound(
                "models are named, not given by path (models.allow_paths is off)", param="model"
            )
        known = ", ".join(e.name for e in entries) or "none (add one with `omlx pull`)"
        raise ModelNotFound(f"model {name!r} not found; available: {known}", param="model")


def looks_like_path(name: str) -> bool:
    """Absolute, home-relative or dot-relative, or with a `..` part: never a store name."""
    parts = name.replace("\\", "/").split("/")
    return name.startswith(("/", "~", "./", "\\")) or ".." in parts or name in (".", "..")


def _scan_dir(root: Path) -> list[tuple[str, Path]]:
    """Model folders directly in `root` or one level down (`org/name`)."""
    if not root.is_dir():
        return []
    out: list[tuple[str, Path]] = []
    for child in sorted(root.iterdir()):
        if child.name.startswith(".") or not child.is_dir():
            continue
        if is_model_folder(child):
            out.append((child.name, child))
            continue
        for grandchild in sorted(child.iterdir()):
            if not grandchild.name.startswith(".") and is_model_folder(grandchild):
                out.append((f"{child.name}/{grandchild.name}", grandchild))
    return out


def _scan_hf_cache(cache: Path) -> list[tuple[str, Path]]:
    """`models--org--name/snapshots/<rev>/` folders; the `main` ref, else the newest snapshot."""
    if not cache.is_dir():
        return []
    out: list[tuple[str, Path]] = []
    for repo in sorted(cache.glob("models--*")):
        snapshot = _current_snapshot(repo)
        if snapshot is not None and is_model_folder(snapshot):
            out.append((repo.name.removeprefix("models--").replace("--", "/"), snapshot))
    return out


def _current_snapshot(repo: Path) -> Path | None:
    ref = repo / "refs" / "main"
    if ref.is_file():
        snapshot = repo / "snapshots" / ref.read_text().strip()
        if snapshot.is_dir():
            return snapshot
    snapshots = [p for p in (repo / "snapshots").glob("*") if p.is_dir()]
    return max(snapshots, key=lambda p: p.stat().st_mtime) if snapshots else None


TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt")
NAME_RE = re.compile(r"^[A-Za-z0-9][\w.-]*$")


def check_name(name: str) -> str:
    """A store name is one safe path component."""
    if not NAME_RE.match(name) or name.endswith("."):
        raise InvalidRequest(
            f"bad model name {name!r}: use letters, digits, '.', '_' and '-'", param="name"
        )
    return name


def validate_folder(path: Path) -> None:
    """Raise InvalidRequest unless `path` holds config.json, safetensors weights and a tokenizer."""
    if not path.is_dir():
        raise InvalidRequest(f"{path} is not a folder", param="source")
    try:
        inspect_model(path)
    except NotAModelFolder as e:
        raise InvalidRequest(f"not a model folder: {e}", param="source") from None
    has_tokenizer = any((path / f).is_file() for f in TOKENIZER_FILES) or any(
        path.glob("*.tiktoken")
    )
    if not has_tokenizer:
        wanted = ", ".join(TOKENIZER_FILES)
        raise InvalidRequest(f"{path}: no tokenizer (one of {wanted})", param="source")


def add_folder(store: ModelStore, path: Path, name: str | None = None) -> ModelEntry:
    """Add a local model folder to the store as a symlink in the primary directory.

    A folder already inside a store directory is left where it is.
    """
    path = path.expanduser().resolve()
    validate_folder(path)
    for d in store.dirs:
        root = d.expanduser().resolve()
        if name is None and path.is_relative_to(root) and len(path.relative_to(root).parts) <= 2:
            return store.resolve(path.relative_to(root).as_posix())
    link = store.primary_dir / check_name(name or path.name)
    if link.is_symlink() and link.resolve() == path:
        return store.resolve(link.name)
    if link.exists() or link.is_symlink():
        raise InvalidRequest(
            f"a model named {link.name!r} already exists at {link}; choose another --name",
            param="name",
        )
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(path, target_is_directory=True)
    return store.resolve(link.name)
