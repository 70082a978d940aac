"""What a model folder holds: its type, architecture, size and quantization, read without MLX."""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any


class ModelType(StrEnum):
    LLM = "llm"
    VLM = "vlm"
    EMBEDDING = "embedding"
    RERANKER = "reranker"
    OCR = "ocr"


# model_type values of vision-language models whose config may lack a `vision_config`.
VLM_MODEL_TYPES = frozenset(
    {
        "llava",
        "llava_next",
        "llava_qwen2",
        "qwen2_vl",
        "qwen2_5_vl",
        "qwen3_vl",
        "qwen3_vl_moe",
        "idefics2",
        "idefics3",
        "smolvlm",
        "paligemma",
        "mllama",
        "pixtral",
        "mistral3",
        "florence2",
        "internvl_chat",
        "phi3_v",
        "molmo",
        "kimi_vl",
        "aya_vision",
        "llama4",
        "gemma3",
        "gemma3n",
        "deepseek_vl_v2",
        "multi_modality",
        "bunny-llama",
    }
)

# model_type values of OCR models; anything whose model_type or architecture says "ocr" also counts.
OCR_MODEL_TYPES = frozenset({"deepseekocr", "dots_ocr", "paddleocr_vl", "got_ocr2", "nougat"})

# Encoder families that serve embeddings when they have no task head.
ENCODER_MODEL_TYPES = frozenset(
    {
        "bert",
        "roberta",
        "xlm-roberta",
        "distilbert",
        "mpnet",
        "nomic_bert",
        "modernbert",
        "electra",
        "deberta",
        "deberta-v2",
        "e5",
        "gte",
        "new",
        "jina_bert",
    }
)

# Files sentence-transformers writes beside an embedding model.
SENTENCE_TRANSFORMERS_FILES = ("modules.json", "config_sentence_transformers.json", "1_Pooling")

WEIGHT_SUFFIXES = (".safetensors",)
CONTEXT_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "max_sequence_length",
    "seq_length",
    "n_ctx",
    "model_max_length",
)
_DTYPE_NAMES = {
    "F64": "float64",
    "F32": "float32",
    "F16": "float16",
    "BF16": "bfloat16",
    "I64": "int64",
    "I32": "int32",
    "I16": "int16",
    "I8": "int8",
    "U8": "uint8",
    "U32": "uint32",
    "BOOL": "bool",
    "F8_E4M3": "float8_e4m3",
    "F8_E5M2": "float8_e5m2",
}
_DTYPE_BYTES = {
    "F64": 8,
    "F32": 4,
    "F16": 2,
    "BF16": 2,
    "I64": 8,
    "I32": 4,
    "U32": 4,
    "I16": 2,
    "I8": 1,
    "U8": 1,
    "BOOL": 1,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
}
_MAX_HEADER_BYTES = 100 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class ModelInfo:
    type: ModelType
    architecture: str
    num_params: int | None
    size_bytes: int
    quantization: str | None
    context_length: int | None


class NotAModelFolder(ValueError):
    """The folder lacks config.json or weights, or its config cannot be read."""


def read_config(path: Path) -> dict[str, Any]:
    try:
        config = json.loads((path / "config.json").read_text())
    except FileNotFoundError:
        raise NotAModelFolder(f"{path}: no config.json") from None
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
        raise NotAModelFolder(f"{path}/config.json: not readable JSON ({e})") from None
    if not isinstance(config, dict):
        raise NotAModelFolder(f"{path}/config.json: not a JSON object")
    return config


def weight_files(path: Path) -> list[Path]:
    return sorted(p for p in path.iterdir() if p.name.endswith(WEIGHT_SUFFIXES) and p.is_file())


def is_model_folder(path: Path) -> bool:
    """A folder with a config.json and at least one safetensors weight file."""
    try:
        return (path / "config.json").is_file() and bool(weight_files(path))
    except OSError:
        return False


def architecture_of(config: dict[str, Any]) -> str:
    archs = config.get("architectures")
    if isinstance(archs, list) and archs and isinstance(archs[0], str):
        return archs[0]
    return str(config.get("model_type", "unknown"))


def detect_type(config: dict[str, Any], file_names: Iterable[str], name: str = "") -> ModelType:
    """Classify a model from its config, the names of the files beside it and its folder name."""
    files = set(file_names)
    model_type = str(config.get("model_type", "")).lower()
    arch = architecture_of(config)
    arch_l, name_l = arch.lower(), name.lower()
    is_causal = arch.endswith(("ForCausalLM", "LMHeadModel"))
    is_vlm = (
        "vision_config" in config
        or "vision_tower" in config
        or model_type in VLM_MODEL_TYPES
        or "visionlanguage" in arch_l
    )
    if model_type in OCR_MODEL_TYPES or "ocr" in model_type or "ocr" in arch_l:
        return ModelType.OCR
    # Fine-tuned VLMs keep their base architecture (olmOCR is a qwen2_vl); the name tells.
    if is_vlm and "ocr" in name_l:
        return ModelType.OCR
    if arch.endswith("ForSequenceClassification"):
        return ModelType.RERANKER
    if any(f in files for f in SENTENCE_TRANSFORMERS_FILES):
        return ModelType.EMBEDDING
    # Yes/no rerankers (Qwen3-Reranker) are plain causal LMs scored on two logits.
    if is_causal and "rerank" in name_l:
        return ModelType.RERANKER
    if is_vlm:
        return ModelType.VLM
    if not is_causal and (arch.endswith("Model") or model_type in ENCODER_MODEL_TYPES):
        return ModelType.EMBEDDING
    if "embed" in name_l and not is_causal:
        return ModelType.EMBEDDING
    return ModelType.LLM


def read_safetensors_header(path: Path) -> dict[str, Any]:
    """The JSON header of a safetensors file; the tensor data is never read."""
    with path.open("rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            raise NotAModelFolder(f"{path}: truncated safetensors file")
        (n,) = struct.unpack("<Q", raw)
        if n > _MAX_HEADER_BYTES:
            raise NotAModelFolder(f"{path}: implausible safetensors header ({n} bytes)")
        body = f.read(n)
    try:
        header = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise NotAModelFolder(f"{path}: bad safetensors header ({e})") from None
    if not isinstance(header, dict):
        raise NotAModelFolder(f"{path}: bad safetensors header")
    return header


def _quant_config(config: dict[str, Any]) -> dict[str, Any] | None:
    q = config.get("quantization") or config.get("quantization_config")
    if isinstance(q, dict) and isinstance(q.get("bits"), int):
        return q
    return None


def _bits_for(tensor_name: str, quant: dict[str, Any]) -> int:
    # mlx-lm writes per-layer overrides as {"model.layers.0.mlp.gate": {"bits": 8, ...}}.
    module = tensor_name.rsplit(".", 1)[0]
    override = quant.get(module)
    if isinstance(override, dict) and isinstance(override.get("bits"), int):
        return override["bits"]
    return quant["bits"]


def count_params(
    headers: Iterable[dict[str, Any]], config: dict[str, Any]
) -> tuple[int, dict[str, int]]:
    """Parameters (unpacked when quantized) and bytes per dtype, from safetensors headers.

    A quantized layer is stored as a packed uint32 `weight` plus `scales`/`biases`; the
    scales and biases are quantization overhead, not parameters.
    """
    quant = _quant_config(config)
    tensors: dict[str, dict[str, Any]] = {}
    for header in headers:
        tensors.update((k, v) for k, v in header.items() if k != "__metadata__")
    num_params = 0
    bytes_by_dtype: dict[str, int] = {}
    for name, info in tensors.items():
        shape = info.get("shape", [])
        dtype = info.get("dtype", "")
        numel = math.prod(shape) if shape else 1
        bytes_by_dtype[dtype] = bytes_by_dtype.get(dtype, 0) + numel * _DTYPE_BYTES.get(dtype, 0)
        base = name.rsplit(".", 1)[0]
        packed = quant is not None and dtype == "U32" and f"{base}.scales" in tensors
        if (
            name.endswith((".scales", ".biases"))
            and tensors.get(f"{base}.weight", {}).get("dtype") == "U32"
        ):
            continue
        num_params += numel * (32 // _bits_for(name, quant)) if packed and quant else numel
    return num_params, bytes_by_dtype


def quantization_label(config: dict[str, Any], bytes_by_dtype: dict[str, int]) -> str | None:
    quant = _quant_config(config)
    if quant is not None:
        label = f"{quant['bits']}-bit"
        if isinstance(quant.get("group_size"), int):
            label += f" g{quant['group_size']}"
        mode = quant.get("mode")
        if isinstance(mode, str) and mode != "affine":
            label += f" {mode}"
        return label
    floats = {k: v for k, v in bytes_by_dtype.items() if k.startswith(("F", "BF"))}
    if floats:
        return _DTYPE_NAMES.get(max(floats, key=floats.__getitem__))
    dtype = config.get("torch_dtype") or config.get("dtype")
    return dtype if isinstance(dtype, str) else None


def context_length(config: dict[str, Any]) -> int | None:
    for section in (config, config.get("text_config"), config.get("llm_config")):
        if not isinstance(section, dict):
            continue
        for key in CONTEXT_KEYS:
            v = section.get(key)
            if isinstance(v, int) and not isinstance(v, bool) and v > 0:
                return v
    return None


def folder_size_bytes(path: Path) -> int:
    """Bytes of every file under `path`, following symlinks (the HF cache links to blobs)."""
    total = 0
    for p in path.rglob("*"):
        # Hidden entries are bookkeeping (huggingface_hub's .cache/ of a local_dir pull).
        if any(part.startswith(".") for part in p.relative_to(path).parts):
            continue
        try:
            if p.is_file():
                total += p.stat().st_size
        except OSError:
            continue
    return total


def inspect_model(path: Path, name: str | None = None) -> ModelInfo:
    """Read config.json and the safetensors headers of one model folder."""
    config = read_config(path)
    weights = weight_files(path)
    if not weights:
        raise NotAModelFolder(f"{path}: no *.safetensors weights")
    headers = [read_safetensors_header(w) for w in weights]
    num_params, bytes_by_dtype = count_params(headers, config)
    files = [p.name for p in path.iterdir()]
    return ModelInfo(
        type=detect_type(config, files, name or path.name),
        architecture=architecture_of(config),
        num_params=num_params or None,
        size_bytes=folder_size_bytes(path),
        quantization=quantization_label(config, bytes_by_dtype),
        context_length=context_length(config),
    )
