"""Writing a tool's config files: timestamped backup first, atomic write, diff, undo.

A change is the whole new text of one file. Before the first byte is written the old
file is copied to `NAME.omlx-backup-YYYYmmdd-HHMMSS[-N]` beside it (a file that did not
exist gets an empty `…-absent` marker instead), so `undo` can put back exactly the bytes
that were there, or remove a file omlx created.
"""

from __future__ import annotations

import difflib
import os
import time
from dataclasses import dataclass
from pathlib import Path

BACKUP_TAG = ".omlx-backup-"
ABSENT_SUFFIX = "-absent"


class ConfigError(Exception):
    """A config file omlx cannot read or write; the message names the file and why."""


@dataclass(frozen=True, slots=True)
class FileChange:
    path: Path
    old: str | None  # None: the file does not exist yet
    new: str

    @property
    def is_noop(self) -> bool:
        return self.old == self.new

    def diff(self) -> str:
        before = (self.old or "").splitlines(keepends=True)
        after = self.new.splitlines(keepends=True)
        label = str(self.path)
        lines = difflib.unified_diff(
            before, after, f"{label} (before)" if self.old is not None else "/dev/null", label
        )
        return "".join(line if line.endswith("\n") else line + "\n" for line in lines)


def read_text(path: Path) -> str | None:
    """The file's text, or None when it does not exist; unreadable → ConfigError."""
    try:
        return path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        return None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text; left untouched") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read it ({e.strerror}); left untouched") from None


def _backup_name(path: Path, stamp: str, absent: bool) -> Path:
    suffix = ABSENT_SUFFIX if absent else ""
    candidate = path.with_name(f"{path.name}{BACKUP_TAG}{stamp}{suffix}")
    n = 1
    while candidate.exists():  # two runs in one second keep both backups
        candidate = path.with_name(f"{path.name}{BACKUP_TAG}{stamp}-{n}{suffix}")
        n += 1
    return candidate


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.omlx-tmp")
    tmp.write_bytes(data)
    if path.exists():  # keep the user's permissions (a config holding keys may be 0600)
        os.chmod(tmp, path.stat().st_mode & 0o7777)
    os.replace(tmp, path)


def apply(changes: list[FileChange], now: float | None = None) -> list[Path]:
    """Back up and write every change that alters its file; returns the backups made."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    backups: list[Path] = []
    for change in changes:
        if change.is_noop:
            continue
        backup = _backup_name(change.path, stamp, absent=change.old is None)
        backup.parent.mkdir(parents=True, exist_ok=True)
        if change.old is None:
            backup.write_bytes(b"")
        else:
            backup.write_bytes(change.path.read_bytes())
        backups.append(backup)
        _write_atomic(change.path, change.new.encode("utf-8"))
    return backups


def backups_of(path: Path) -> list[Path]:
    """This file's backups, oldest first."""
    if not path.parent.is_dir():
        return []
    found = [p for p in path.parent.iterdir() if p.name.startswith(path.name + BACKUP_TAG)]
    return sorted(found, key=lambda p: (p.stat().st_mtime_ns, p.name))


def undo(path: Path) -> Path | None:
    """Restore the newest backup of `path` byte for byte (or remove a file omlx created)
    and delete that backup; None when there is none."""
    found = backups_of(path)
    if not found:
        return None
    latest = found[-1]
    if latest.name.endswith(ABSENT_SUFFIX):
        path.unlink(missing_ok=True)
    else:
        _write_atomic(path, latest.read_bytes())
    latest.unlink()
    return latest
