"""The model store as the web admin manages it: list, delete, import (omlx.engine.api's
ModelCatalog, duck-typed: the store imports nothing of the engine).

Blocking calls; the server runs them in a thread. GGUF conversions run in a child
process, so a server never builds MLX arrays off its engine threads.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

from omlx.errors import InvalidRequest, ModelNotFound
from omlx.models.pull import Progress, pull_model
from omlx.models.store import ModelEntry, ModelStore
from omlx.schemas.models import ImportProgress, StoreEntry

log = logging.getLogger(__name__)


class StoreCatalog:
    def __init__(self, store: ModelStore) -> None:
        self.store = store

    def _is_deletable(self, entry: ModelEntry) -> bool:
        """In a store directory (a folder or a link there), never the hub cache or a path."""
        if entry.source != "local":
            return False
        return any(self._slot(entry, d) is not None for d in self.store.dirs)

    def _slot(self, entry: ModelEntry, root: Path) -> Path | None:
        """The folder or link under `root` that `entry` lives at, if any."""
        candidate = root.expanduser() / entry.name
        if candidate.is_symlink() or candidate.is_dir():
            return candidate
        return None

    def entries(self) -> list[StoreEntry]:
        return [self._row(e) for e in self.store.list()]

    def _row(self, e: ModelEntry) -> StoreEntry:
        return StoreEntry(
            name=e.name, type=e.type.value, architecture=e.architecture,
            num_params=e.num_params, size_bytes=e.size_bytes, quantization=e.quantization,
            context_length=e.context_length, source=e.source, path=str(e.path),
            deletable=self._is_deletable(e),
        )  # fmt: skip

    def delete(self, name: str) -> str:
        entry = next((e for e in self.store.list() if e.name == name), None)
        if entry is None:
            raise ModelNotFound(f"model {name!r} is not in the store", param="model")
        for root in self.store.dirs:
            slot = self._slot(entry, root)
            if slot is None:
                continue
            if slot.is_symlink():  # a folder added by path: drop the link, keep the folder
                slot.unlink()
                return f"link {slot}"
            shutil.rmtree(slot)
            return str(slot)
        raise InvalidRequest(f"{name} is not in a store directory ({entry.path})", param="model")

    def import_model(
        self,
        source: str,
        *,
        name: str | None = None,
        dtype: str = "float32",
        progress: Progress | None = None,
    ) -> StoreEntry:
        result = pull_model(
            self.store, [source], name=name, dtype=dtype, progress=progress, gguf_in_child=True
        )
        if isinstance(result, list):  # only a dry run returns files
            raise InvalidRequest("nothing was imported")
        if progress is not None:
            progress(ImportProgress(phase="done"))
        log.info("imported %s from %s", result.name, source)
        return next(e for e in self.entries() if e.name == result.name)
