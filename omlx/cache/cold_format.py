"""Cold-tier file layout and safetensors header parsing, in pure Python (no MLX, no numpy).

One file per block at `<root>/<first 2 hex chars of key>/<key>.safetensors`. The
safetensors `__metadata__` carries everything the index needs, so a start-up scan reads
headers only.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path

from omlx.cache.chain_hash import BlockKey
from omlx.cache.index import BlockInfo

FORMAT_NAME = "omlx-kv-block"
FORMAT_VERSION = 1
SUFFIX = ".safetensors"
TMP_SUFFIX = ".tmp"
_MAX_HEADER_BYTES = 16 * 1024 * 1024

_REQUIRED = (
    "format",
    "format_version",
    "key",
    "model_fingerprint",
    "block_index",
    "block_size",
    "num_layers",
    "dtype",
    "cache_types",
    "has_window",
    "has_state",
    "checksum",
)


class BadBlockFile(Exception):
    """A cold-tier file that is corrupt, truncated, foreign or of another format version."""


@dataclass(frozen=True, slots=True)
class BlockHeader:
    info: BlockInfo
    block_size: int
    num_layers: int
    dtype: str
    cache_types: tuple[str, ...]
    checksum: str
    meta: dict[str, str]  # the whole __metadata__ (the slicer's layout included)
    tensors: dict[str, dict]  # name -> {"dtype", "shape", "data_offsets"}
    data_start: int  # byte offset of the data section
    file_bytes: int


def block_path(root: Path, key: BlockKey) -> Path:
    return root / key[:2] / f"{key}{SUFFIX}"


def is_block_key(name: str) -> bool:
    return len(name) == 32 and all(c in "0123456789abcdef" for c in name)


def read_header(path: Path) -> BlockHeader:
    """Parse and validate a block file's header; raises BadBlockFile, never anything else."""
    try:
        with open(path, "rb") as f:
            file_bytes = os.fstat(f.fileno()).st_size
            head = f.read(8)
            if len(head) != 8:
                raise BadBlockFile("shorter than a safetensors header")
            (n,) = struct.unpack("<Q", head)
            if n > _MAX_HEADER_BYTES or 8 + n > file_bytes:
                raise BadBlockFile("header length past the end of the file")
            header = json.loads(f.read(n))
    except BadBlockFile:
        raise
    except (OSError, ValueError, UnicodeDecodeError) as e:
        raise BadBlockFile(f"unreadable header: {e}") from None
    return _parse(path, header, 8 + n, file_bytes)


def _parse(path: Path, header: object, data_start: int, file_bytes: int) -> BlockHeader:
    if not isinstance(header, dict):
        raise BadBlockFile("header is not an object")
    meta = header.pop("__metadata__", None)
    if not isinstance(meta, dict) or meta.get("format") != FORMAT_NAME:
        raise BadBlockFile("not an omlx KV block")
    missing = [k for k in _REQUIRED if k not in meta]
    if missing:
        raise BadBlockFile(f"metadata lacks {', '.join(missing)}")
    if meta["format_version"] != str(FORMAT_VERSION):
        raise BadBlockFile(f"format version {meta['format_version']} != {FORMAT_VERSION}")
    if meta["key"] != path.name.removesuffix(SUFFIX) or path.parent.name != meta["key"][:2]:
        raise BadBlockFile("file name does not match the key in its header")
    end = 0
    for name, t in header.items():
        offsets = t.get("data_offsets") if isinstance(t, dict) else None
        if not (isinstance(offsets, list) and len(offsets) == 2):
            raise BadBlockFile(f"tensor {name!r} has no data offsets")
        end = max(end, int(offsets[1]))
    if data_start + end != file_bytes:
        raise BadBlockFile(f"size {file_bytes} != {data_start + end} (truncated or padded)")
    try:
        block_size = int(meta["block_size"])
        info = BlockInfo(
            key=BlockKey(meta["key"]),
            model_fingerprint=meta["model_fingerprint"],
            block_index=int(meta["block_index"]),
            num_tokens=block_size,
            nbytes=file_bytes,
            has_window=meta["has_window"] == "1",
            has_state=meta["has_state"] == "1",
            model_name=meta.get("model_name", ""),
        )
        return BlockHeader(
            info=info,
            block_size=block_size,
            num_layers=int(meta["num_layers"]),
            dtype=meta["dtype"],
            cache_types=tuple(json.loads(meta["cache_types"])),
            checksum=meta["checksum"],
            meta=meta,
            tensors=header,
            data_start=data_start,
            file_bytes=file_bytes,
        )
    except (ValueError, TypeError) as e:
        raise BadBlockFile(f"bad metadata value: {e}") from None


def make_metadata(
    info: BlockInfo, *, block_size: int, checksum: str, layout: dict[str, str]
) -> dict[str, str]:
    """The `__metadata__` of a block file (safetensors metadata is str -> str).

    `layout` comes from the KV slicer: num_layers, dtype, cache_types and per-layer params.
    """
    return {
        **layout,
        "format": FORMAT_NAME,
        "format_version": str(FORMAT_VERSION),
        "key": info.key,
        "model_fingerprint": info.model_fingerprint,
        "model_name": info.model_name,
        "block_index": str(info.block_index),
        "block_size": str(block_size),
        "has_window": "1" if info.has_window else "0",
        "has_state": "1" if info.has_state else "0",
        "checksum": checksum,
    }
