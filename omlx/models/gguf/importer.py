"""Convert a GGUF into an MLX model folder (safetensors + configs + tokenizer), atomically."""

from __future__ import annotations

import json
import logging
import shutil
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np

from omlx.errors import ImportFailed

from .config import ArchSpec, arch_spec, write_configs
from .dequant import KEEPABLE_TYPES, MLX_GROUP_SIZE, dequantize, is_supported, pack_for_mlx
from .names import hf_name, unpermute_rotary_rows
from .reader import GGUFModel, GGUFTensor, join_parts, read_gguf
from .tokenizer import write_tokenizer

logger = logging.getLogger(__name__)

DTYPES = {"float32": mx.float32, "float16": mx.float16, "bfloat16": mx.bfloat16, "keep": mx.float16}
MAX_SHARD_BYTES = 2 * 1024**3
# Modules mlx-lm can quantize; an unquantized one gets an explicit `false` in the config.
_QUANTIZABLE_SUFFIXES = ("_proj.weight", "embed_tokens.weight", "lm_head.weight")


def import_gguf(
    source: Path | Sequence[Path],
    dest_dir: Path,
    *,
    dtype: str = "float32",
    name: str | None = None,
    generation_defaults: Mapping[str, Any] | None = None,
) -> Path:
    """Convert a GGUF (or its ordered split parts, concatenated) into an MLX model folder.

    `generation_defaults` (sampling keys such as temperature) go into generation_config.json.
    """
    if dtype not in DTYPES:
        raise ImportFailed(f"unknown dtype {dtype!r} (choose from {', '.join(DTYPES)})")
    parts = [Path(source)] if isinstance(source, str | Path) else [Path(p) for p in source]
    if not parts:
        raise ImportFailed("no GGUF file given")
    dest_dir = Path(dest_dir)
    if dest_dir.exists() and any(dest_dir.iterdir()):
        raise ImportFailed(f"destination {dest_dir} already exists and is not empty")
    dest_dir.parent.mkdir(parents=True, exist_ok=True)
    work = dest_dir.parent / f".{dest_dir.name}.importing-{uuid.uuid4().hex[:8]}"
    work.mkdir()
    started = time.monotonic()
    try:
        gguf_path = parts[0] if len(parts) == 1 else join_parts(parts, work / "joined.gguf.tmp")
        model = read_gguf(gguf_path)
        _convert(
            model, work, dtype=dtype, name=name or dest_dir.name,
            generation_defaults=generation_defaults,
        )  # fmt: skip
        if len(parts) > 1:
            del model  # drop the memory map before deleting the joined copy
            gguf_path.unlink()
        if dest_dir.exists():
            dest_dir.rmdir()  # empty, checked above
        work.rename(dest_dir)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    logger.info(
        "imported %s into %s in %.1f s", parts[0].name, dest_dir, time.monotonic() - started
    )
    return dest_dir


def _convert(
    model: GGUFModel,
    work: Path,
    *,
    dtype: str,
    name: str,
    generation_defaults: Mapping[str, Any] | None = None,
) -> None:
    spec = arch_spec(model)  # fail fast on an unsupported architecture
    _check_types(model)
    special = write_tokenizer(model, work)
    quantized: dict[str, int] = {}
    unquantized: list[str] = []
    shards = _ShardWriter(work)
    for hf, array, bits in _converted_tensors(model, spec, dtype):
        if bits is not None and hf.endswith(".weight"):
            quantized[hf.removesuffix(".weight")] = bits
        elif array.ndim == 2 and hf.endswith(_QUANTIZABLE_SUFFIXES):
            unquantized.append(hf.removesuffix(".weight"))
        shards.add(hf, array)
    shards.close()
    torch_dtype = "float16" if dtype == "keep" else dtype
    write_configs(
        model,
        work,
        special,
        torch_dtype=torch_dtype,
        quantization=_quantization_entry(quantized, unquantized),
        generation_defaults=generation_defaults,
    )
    _tag_name(work, name)


def _check_types(model: GGUFModel) -> None:
    for t in model.tensors.values():
        if not is_supported(t.qtype):
            raise ImportFailed(f"tensor {t.name!r} uses unsupported GGUF quant type {t.qtype.name}")


def _converted_tensors(
    model: GGUFModel, spec: ArchSpec, dtype: str
) -> Iterator[tuple[str, mx.array, int | None]]:
    """Yield (hf_name, array, bits-or-None) for every tensor, transformed for mlx-lm."""
    target = DTYPES[dtype]
    heads = int(model.require("attention.head_count"))
    kv_heads = int(model.arch_field("attention.head_count_kv", heads))
    for t in model.tensors.values():
        hf = hf_name(t.name, model.arch)
        if hf is None:
            continue
        rotary_heads = None
        if spec.permutes_qk and ".self_attn.q_proj." in hf:
            rotary_heads = heads
        elif spec.permutes_qk and ".self_attn.k_proj." in hf:
            rotary_heads = kv_heads
        if dtype == "keep" and _keepable(t, hf):
            packed = pack_for_mlx(t.data, t.qtype, t.name)
            base = hf.removesuffix(".weight")
            for suffix, arr in (
                ("weight", packed.weight),
                ("scales", packed.scales),
                ("biases", packed.biases),
            ):
                if rotary_heads is not None:
                    arr = unpermute_rotary_rows(arr, rotary_heads)
                yield f"{base}.{suffix}", mx.array(np.ascontiguousarray(arr)), packed.bits
            continue
        values = dequantize(t.data, t.qtype, t.name).reshape(t.shape)
        if spec.norm_offset and hf.endswith("norm.weight"):
            values = values - np.float32(spec.norm_offset)
        if rotary_heads is not None:
            values = unpermute_rotary_rows(values, rotary_heads)
        yield hf, mx.array(np.ascontiguousarray(values)).astype(target), None


def _keepable(t: GGUFTensor, hf: str) -> bool:
    return t.qtype in KEEPABLE_TYPES and len(t.shape) == 2 and hf.endswith(_QUANTIZABLE_SUFFIXES)


def _quantization_entry(quantized: dict[str, int], unquantized: list[str]) -> dict[str, Any] | None:
    """mlx-lm's `quantization` config: a default plus per-module overrides."""
    if not quantized:
        return None
    default_bits = Counter(quantized.values()).most_common(1)[0][0]
    entry: dict[str, Any] = {"group_size": MLX_GROUP_SIZE, "bits": default_bits}
    for module, bits in sorted(quantized.items()):
        if bits != default_bits:
            entry[module] = {"group_size": MLX_GROUP_SIZE, "bits": bits}
    for module in sorted(unquantized):
        entry[module] = False
    return entry


def _tag_name(work: Path, name: str) -> None:
    config_path = work / "config.json"
    config = json.loads(config_path.read_text())
    config["omlx_name"] = name
    config_path.write_text(json.dumps(config, indent=2))


class _ShardWriter:
    """Write tensors into safetensors shards of at most MAX_SHARD_BYTES, plus an index."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.pending: dict[str, mx.array] = {}
        self.pending_bytes = 0
        self.shards: list[dict[str, mx.array]] = []
        self.files: list[Path] = []
        self.weight_map: dict[str, int] = {}

    def add(self, name: str, array: mx.array) -> None:
        if self.pending and self.pending_bytes + array.nbytes > MAX_SHARD_BYTES:
            self._flush()
        self.pending[name] = array
        self.pending_bytes += array.nbytes

    def _flush(self) -> None:
        index = len(self.files)
        path = self.folder / f"shard-{index:05d}.safetensors"
        mx.save_safetensors(str(path), self.pending, metadata={"format": "mlx"})
        for key in self.pending:
            self.weight_map[key] = index
        self.files.append(path)
        self.pending, self.pending_bytes = {}, 0

    def close(self) -> None:
        if self.pending:
            self._flush()
        total = len(self.files)
        if total == 1:
            self.files[0].rename(self.folder / "model.safetensors")
            return
        names = [f"model-{i + 1:05d}-of-{total:05d}.safetensors" for i in range(total)]
        for path, final in zip(self.files, names, strict=True):
            path.rename(self.folder / final)
        index = {
            "metadata": {},
            "weight_map": {k: names[i] for k, i in sorted(self.weight_map.items())},
        }
        (self.folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
