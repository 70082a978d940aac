"""Cold tier on disk: a background writer of block files and a checked reader (numpy, no MLX).

The engine thread hands over blocks whose arrays are already numpy (evaluated, copied
out of MLX), so the writer thread never touches MLX. Each write goes to a tmp file in the
target folder, is fsynced, then renamed: a crash leaves a tmp file or nothing, never a
partial `.safetensors` that a later scan would read as valid.
"""

from __future__ import annotations

import hashlib
import logging
import os
import queue
import threading
import uuid
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import safetensors.numpy

from omlx.cache.cold_format import (
    TMP_SUFFIX,
    BadBlockFile,
    BlockHeader,
    block_path,
    make_metadata,
    read_header,
)
from omlx.cache.cold_index import ColdEntry
from omlx.cache.hot_tier import HotBlock

log = logging.getLogger(__name__)

WrittenCallback = Callable[[ColdEntry], None]


def checksum(arrays: dict[str, np.ndarray]) -> str:
    """blake2b over names, dtypes, shapes and bytes, in name order."""
    h = hashlib.blake2b(digest_size=16)
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(f"{name}|{a.dtype.str}|{a.shape}|".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def write_block(root: Path, block: HotBlock, block_size: int) -> ColdEntry:
    """Write one block file atomically (tmp + fsync + rename); returns its index entry."""
    path = block_path(root, block.key)
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = make_metadata(
        block.info, block_size=block_size, checksum=checksum(block.arrays), layout=block.meta
    )
    data = safetensors.numpy.save(block.arrays, metadata=meta)
    # The writer's pid in the name: a restart removes the tmp files of dead writers.
    tmp = path.parent / f"{block.key}.{os.getpid()}-{uuid.uuid4().hex[:8]}{TMP_SUFFIX}"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)
    st = path.stat()
    info = block.info
    if info.nbytes != st.st_size:  # the index counts bytes on disk, not bytes in RAM
        info = replace(info, nbytes=st.st_size)
    return ColdEntry(info=info, path=path, atime=st.st_mtime)


def read_block(path: Path) -> tuple[BlockHeader, dict[str, np.ndarray]]:
    """Read and verify a block file; raises BadBlockFile for anything wrong with it."""
    header = read_header(path)
    try:
        data = path.read_bytes()
        if len(data) != header.file_bytes:
            raise BadBlockFile("file changed while reading")
        arrays = safetensors.numpy.load(data)
    except BadBlockFile:
        raise
    except Exception as e:  # safetensors raises its own error types on bad bytes
        raise BadBlockFile(f"unreadable tensors: {e}") from None
    if checksum(arrays) != header.checksum:
        raise BadBlockFile("checksum mismatch (corrupt data)")
    return header, arrays


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class ColdWriter:
    """One background thread writing blocks handed over by `submit`, in order."""

    def __init__(self, root: Path, block_size: int, on_written: WrittenCallback) -> None:
        self.root = root
        self.block_size = block_size
        self.on_written = on_written
        self.num_failed = 0
        self._queue: queue.SimpleQueue[HotBlock | None] = queue.SimpleQueue()
        self._idle = threading.Condition()
        self._num_pending = 0
        self._thread = threading.Thread(target=self._run, name="omlx-cold-writer", daemon=True)
        self._thread.start()

    def submit(self, block: HotBlock) -> None:
        """Queue a block for writing; never blocks. Its arrays must be numpy already."""
        with self._idle:
            self._num_pending += 1
        self._queue.put(block)

    def flush(self, timeout_s: float | None = None) -> bool:
        """Wait until every submitted block is written; False on timeout."""
        with self._idle:
            return self._idle.wait_for(lambda: self._num_pending == 0, timeout=timeout_s)

    def close(self, timeout_s: float | None = 30.0) -> None:
        self.flush(timeout_s)
        self._queue.put(None)
        self._thread.join(timeout_s)

    def _run(self) -> None:
        while True:
            block = self._queue.get()
            if block is None:
                return
            try:
                entry = write_block(self.root, block, self.block_size)
                self.on_written(entry)
            except Exception:
                self.num_failed += 1
                log.exception("cold cache: writing block %s failed", block.key)
            finally:
                with self._idle:
                    self._num_pending -= 1
                    self._idle.notify_all()
