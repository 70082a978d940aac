"""Read a GGUF file (or its split parts) into metadata and raw tensor payloads."""

from __future__ import annotations

import shutil
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from omlx.errors import ImportFailed


@dataclass(slots=True)
class GGUFTensor:
    name: str
    qtype: GGMLQuantizationType
    shape: tuple[int, ...]  # numpy (row-major) order: rows first
    data: np.ndarray  # memory-mapped raw payload (uint8 blocks for quantized types)


@dataclass(slots=True)
class GGUFModel:
    path: Path
    metadata: dict[str, Any]
    tensors: dict[str, GGUFTensor] = field(default_factory=dict)

    @property
    def arch(self) -> str:
        arch = self.metadata.get("general.architecture")
        if not isinstance(arch, str):
            raise ImportFailed(f"{self.path}: GGUF metadata has no general.architecture")
        return arch

    def arch_field(self, key: str, default: Any = None) -> Any:
        """`{arch}.{key}` from the metadata, e.g. arch_field("block_count")."""
        return self.metadata.get(f"{self.arch}.{key}", default)

    def require(self, key: str) -> Any:
        full = f"{self.arch}.{key}"
        if full not in self.metadata:
            raise ImportFailed(f"{self.path}: GGUF metadata lacks {full}")
        return self.metadata[full]


def join_parts(parts: Sequence[Path], dest: Path) -> Path:
    """Concatenate byte-split parts (part00, part01, ...) in the given order into dest."""
    with dest.open("wb") as out:
        for part in parts:
            if not part.is_file():
                raise ImportFailed(f"GGUF part not found: {part}")
            with part.open("rb") as src:
                shutil.copyfileobj(src, out, length=16 * 1024 * 1024)
    return dest


def read_gguf(path: Path) -> GGUFModel:
    """Parse the header; raise ImportFailed for anything that is not a readable GGUF.

    A small parser of our own: gguf's GGUFReader builds one numpy view per array element,
    which takes ~15 s for Gemma's 262k-token vocabulary; this takes well under one.
    """
    if not path.is_file():
        raise ImportFailed(f"GGUF file not found: {path}")
    try:
        data = np.memmap(path, dtype=np.uint8, mode="r")
    except (ValueError, OSError) as exc:
        raise ImportFailed(f"{path} is not a readable GGUF file: {exc}") from exc
    try:
        return _parse(path, data)
    except (ValueError, KeyError, IndexError, struct.error, UnicodeDecodeError) as exc:
        raise ImportFailed(f"{path} is not a readable GGUF file: {exc}") from exc


class _Cursor:
    def __init__(self, buf: np.ndarray) -> None:
        self.buf = buf
        self.view = memoryview(buf)  # type: ignore[arg-type]
        self.pos = 0

    def unpack(self, fmt: str) -> Any:
        values = struct.unpack_from(fmt, self.view, self.pos)
        self.pos += struct.calcsize(fmt)
        return values[0] if len(values) == 1 else values

    def string(self) -> str:
        size = self.unpack("<Q")
        text = bytes(self.view[self.pos : self.pos + size]).decode("utf-8")
        self.pos += size
        return text

    def value(self, vtype: int) -> Any:
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            item_type, count = self.unpack("<IQ")
            if item_type in _SCALARS:
                fmt = _SCALARS[item_type]
                size = struct.calcsize(fmt) * count
                array = np.frombuffer(self.buf, dtype=np.dtype(fmt), count=count, offset=self.pos)
                self.pos += size
                return array.tolist()
            return [self.value(item_type) for _ in range(count)]
        if vtype not in _SCALARS:
            raise ValueError(f"unknown metadata value type {vtype}")
        return self.unpack(_SCALARS[vtype])


# GGUF metadata value types -> struct formats (little-endian).
_SCALARS = {
    0: "<B",
    1: "<b",
    2: "<H",
    3: "<h",
    4: "<I",
    5: "<i",
    6: "<f",
    7: "<?",
    10: "<Q",
    11: "<q",
    12: "<d",
}
_STRING, _ARRAY = 8, 9
_NUMPY_FLOATS = {GGMLQuantizationType.F32: np.float32, GGMLQuantizationType.F16: np.float16}


def _parse(path: Path, data: np.ndarray) -> GGUFModel:
    cur = _Cursor(data)
    if bytes(cur.view[:4]) != b"GGUF":
        raise ValueError("bad magic (not a GGUF file)")
    cur.pos = 4
    version, num_tensors, num_kv = cur.unpack("<IQQ")
    if version < 2:
        raise ValueError(f"GGUF version {version} is too old")
    metadata: dict[str, Any] = {}
    for _ in range(num_kv):
        key = cur.string()
        metadata[key] = cur.value(cur.unpack("<I"))
    infos = []
    for _ in range(num_tensors):
        name = cur.string()
        num_dims = cur.unpack("<I")
        dims = [cur.unpack("<Q") for _ in range(num_dims)]
        type_id, offset = cur.unpack("<IQ")
        infos.append((name, dims, type_id, offset))
    alignment = int(metadata.get("general.alignment", 32))
    start = -(-cur.pos // alignment) * alignment
    model = GGUFModel(path=path, metadata=metadata)
    for name, dims, type_id, offset in infos:
        try:
            qtype = GGMLQuantizationType(type_id)
        except ValueError:
            raise ImportFailed(f"tensor {name!r} uses unknown GGUF type id {type_id}") from None
        shape = tuple(int(d) for d in reversed(dims))  # GGUF lists the innermost dim first
        block_size, type_size = GGML_QUANT_SIZES[qtype]
        row_bytes = dims[0] // block_size * type_size
        num_rows = int(np.prod(dims[1:], dtype=np.int64)) if len(dims) > 1 else 1
        begin = start + offset
        raw = data[begin : begin + num_rows * row_bytes]
        if raw.size != num_rows * row_bytes:
            raise ValueError(f"tensor {name!r} runs past the end of the file (truncated?)")
        if qtype in _NUMPY_FLOATS:
            array = raw.view(_NUMPY_FLOATS[qtype]).reshape(shape)
        else:
            array = raw.reshape(*shape[:-1], row_bytes)
        model.tensors[name] = GGUFTensor(name=name, qtype=qtype, shape=shape, data=array)
    return model
