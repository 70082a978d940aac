"""Cold-tier index: blocks on disk in LRU order by access time, under a size cap (pure Python).

Rebuilt from the directory at start-up by reading headers only; files that are corrupt,
truncated, foreign or of another format/block size are skipped and counted, never fatal.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from omlx.cache.chain_hash import BlockKey
from omlx.cache.cold_format import SUFFIX, TMP_SUFFIX, BadBlockFile, read_header
from omlx.cache.index import BlockInfo

log = logging.getLogger(__name__)

DEFAULT_CAP_SHARE = 0.10  # of the free disk at start-up (settings: cache.cold_cap_bytes = 0)


@dataclass(slots=True)
class ColdEntry:
    info: BlockInfo
    path: Path
    atime: float  # last access; persisted as the file's mtime (atime is unreliable: relatime,
    # noatime, and our own header reads would move it), so LRU order survives restarts


@dataclass(slots=True)
class ScanReport:
    num_blocks: int = 0
    num_skipped: int = 0
    num_bytes: int = 0


def default_cap_bytes(root: Path, share: float = DEFAULT_CAP_SHARE) -> int:
    """A share of the free space on the disk holding `root` (its nearest existing parent)."""
    probe = root
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return int(shutil.disk_usage(probe).free * share)


class ColdIndex:
    """Which blocks are on disk, oldest access first. Not thread-safe: the owner locks.

    Mutators return the entries evicted by the cap; the caller deletes their files outside
    its lock (disk I/O never happens under the lock).
    """

    def __init__(self, root: Path, cap_bytes: int, block_size: int) -> None:
        self.root = root
        self.cap_bytes = cap_bytes
        self.block_size = block_size
        self._entries: OrderedDict[BlockKey, ColdEntry] = OrderedDict()
        self.num_bytes = 0
        self.num_skipped = 0

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def keys(self) -> list[BlockKey]:
        """Keys from least to most recently accessed (the eviction order)."""
        return list(self._entries)

    def entries(self) -> list[ColdEntry]:
        return list(self._entries.values())

    def peek(self, key: BlockKey) -> ColdEntry | None:
        return self._entries.get(key)

    def touch(self, key: BlockKey, now: float) -> ColdEntry | None:
        entry = self._entries.get(key)
        if entry is not None:
            entry.atime = now
            self._entries.move_to_end(key)
        return entry

    def add(self, entry: ColdEntry) -> list[ColdEntry]:
        """Record a written block as most recently used; returns entries evicted by the cap."""
        self.remove(entry.info.key)
        self._entries[entry.info.key] = entry
        self.num_bytes += entry.info.nbytes
        return self._evict_to(self.cap_bytes)

    def remove(self, key: BlockKey) -> ColdEntry | None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self.num_bytes -= entry.info.nbytes
        return entry

    def remove_model(self, model_fingerprint: str | None) -> list[ColdEntry]:
        """Forget every block (of one model when given); returns them for deletion."""
        gone = [
            e
            for e in self._entries.values()
            if model_fingerprint is None or e.info.model_fingerprint == model_fingerprint
        ]
        for e in gone:
            self.remove(e.info.key)
        return gone

    def rebuild(self) -> tuple[ScanReport, list[ColdEntry]]:
        """Forget everything and scan the directory; returns the report and cap evictions."""
        self._entries.clear()
        self.num_bytes = 0
        report = ScanReport()
        found = []
        for path in _block_files(self.root):
            try:
                header = read_header(path)
                if header.block_size != self.block_size:
                    raise BadBlockFile(f"block size {header.block_size} != {self.block_size}")
                st = path.stat()
            except (BadBlockFile, OSError) as e:
                report.num_skipped += 1
                log.warning("cold cache: skipping %s: %s", path, e)
                continue
            found.append(ColdEntry(header.info, path, st.st_mtime))
        for entry in sorted(found, key=lambda e: e.atime):
            self._entries[entry.info.key] = entry
            self.num_bytes += entry.info.nbytes
        report.num_blocks = len(self._entries)
        report.num_bytes = self.num_bytes
        self.num_skipped = report.num_skipped
        return report, self._evict_to(self.cap_bytes)

    def _evict_to(self, cap_bytes: int) -> list[ColdEntry]:
        # Oldest access first; a block alone over the cap is dropped as well.
        evicted = []
        while self.num_bytes > cap_bytes and self._entries:
            _, entry = self._entries.popitem(last=False)
            self.num_bytes -= entry.info.nbytes
            evicted.append(entry)
        return evicted


def _block_files(root: Path) -> list[Path]:
    if not root.is_dir():
        return []
    files = []
    for sub in sorted(root.iterdir()):
        if not sub.is_dir() or len(sub.name) != 2:
            continue
        for path in sub.iterdir():
            if path.name.endswith(SUFFIX):
                files.append(path)
            elif path.name.endswith(TMP_SUFFIX):
                _remove_stale_tmp(path)
    return files


def _remove_stale_tmp(path: Path, min_age_s: float = 300.0) -> None:
    # A tmp file is a write that never reached its rename (a crash): never read as a block.
    # One whose writer (the pid in its name) is alive may still be renamed: kept a while.
    try:
        if not _writer_alive(path) or time.time() - path.stat().st_mtime > min_age_s:
            os.unlink(path)
    except OSError:
        pass


def _writer_alive(path: Path) -> bool:
    """Whether the process named in `<key>.<pid>-<rand>.tmp` runs (True if unnamed)."""
    stem = path.name.removesuffix(TMP_SUFFIX).rsplit(".", 1)[-1]
    pid_text, sep, _ = stem.partition("-")
    if not sep or not pid_text.isdigit():
        return True  # an older writer's name: only age tells
    pid = int(pid_text)
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True
