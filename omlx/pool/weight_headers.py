"""What a model's weights will take once the loader has cast or dequantized them on a CPU
(engine.cpu_float32), read from the safetensors headers and config.json alone (no MLX).

Mirrors omlx/platform/cpu_precision.py: half-precision tensors double; with the whole
float32 model within the RAM share, quantized weights become float32 (32 / bits values
per packed uint32, four bytes each) and their scales and biases go.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from omlx.platform.memory import float32_fits

HALF_DTYPES = frozenset({"F16", "BF16"})  # safetensors' names


def tensor_sizes(files: list[Path]) -> Iterator[tuple[str, str, int]]:
    """(name, dtype, bytes) of every tensor in the safetensors files, headers only; a file
    that is not one is skipped (the loader will say what is wrong with it)."""
    for f in files:
        if f.suffix != ".safetensors":
            continue
        with f.open("rb") as fh:
            try:
                (length,) = struct.unpack("<Q", fh.read(8))
                if length > f.stat().st_size:
                    continue
                header = json.loads(fh.read(length))
            except (struct.error, ValueError):
                continue
        for name, entry in header.items():
            if name != "__metadata__" and isinstance(entry, dict):
                begin, end = entry.get("data_offsets", (0, 0))
                yield name, str(entry.get("dtype")), end - begin


def half_precision_bytes(files: list[Path]) -> int:
    """Bytes of float16/bfloat16 tensors."""
    return sum(n for _, dtype, n in tensor_sizes(files) if dtype in HALF_DTYPES)


def dequantized_bytes(path: Path, files: list[Path]) -> int | None:
    """The whole model in float32 with its quantized layers dequantized; None when it has
    none (config.json names no quantization)."""
    try:
        quant = json.loads((path / "config.json").read_text()).get("quantization")
    except (OSError, ValueError):
        return None
    if not isinstance(quant, dict):
        return None
    sizes = list(tensor_sizes(files))
    packed = {n.removesuffix(".weight") for n, dtype, _ in sizes if dtype == "U32"}
    total = 0
    for name, dtype, n in sizes:
        module, _, leaf = name.rpartition(".")
        if module in packed and leaf in ("weight", "scales", "biases"):
            if leaf == "weight":
                total += n * 32 // _bits(quant, module)
            continue  # scales and biases go (a layer's own `bias` stays)
        total += 2 * n if dtype in HALF_DTYPES else n
    return total


def _bits(quant: dict[str, Any], module: str) -> int:
    own = quant.get(module)
    bits = own.get("bits") if isinstance(own, dict) else quant.get("bits")
    return int(bits) if isinstance(bits, int) and bits > 0 else 4


def planned_bytes(path: Path, files: list[Path], size: int, setting: str) -> int:
    """`size` (the files' bytes) as the loader will hold them under `setting` on a CPU."""
    if setting == "off":
        return size
    dense = dequantized_bytes(path, files)
    if dense is not None and float32_fits(dense):
        return dense
    half = half_precision_bytes(files)
    if half and (setting == "on" or float32_fits(size + half)):
        return size + half
    return size
