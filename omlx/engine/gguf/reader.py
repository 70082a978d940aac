"""Read a GGUF file (or its split parts) into metadata and raw tensor payloads."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGMLQuantizationType, GGUFReader

from omlx.errors import ImportFailed

# Token lists are huge; decoding them eagerly is fine (we need them all), but keep the
# rest of the reader from copying payloads: tensor data stays memory-mapped.


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
    """Parse the header; raise ImportFailed for anything that is not a readable GGUF."""
    if not path.is_file():
        raise ImportFailed(f"GGUF file not found: {path}")
    try:
        reader = GGUFReader(path, "r")
    except (ValueError, KeyError, IndexError, OSError) as exc:
        raise ImportFailed(f"{path} is not a readable GGUF file: {exc}") from exc
    metadata: dict[str, Any] = {}
    for key, fld in reader.fields.items():
        if key.startswith("GGUF."):
            continue
        try:
            metadata[key] = fld.contents()
        except (ValueError, IndexError, UnicodeDecodeError) as exc:
            raise ImportFailed(f"{path}: cannot decode metadata field {key}: {exc}") from exc
    model = GGUFModel(path=path, metadata=metadata)
    for t in reader.tensors:
        shape = tuple(int(d) for d in reversed(t.shape.tolist()))
        model.tensors[t.name] = GGUFTensor(
            name=t.name, qtype=GGMLQuantizationType(t.tensor_type), shape=shape, data=t.data
        )
    return model
