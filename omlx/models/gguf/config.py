"""config.json and generation_config.json for an imported GGUF, per architecture."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omlx.errors import ImportFailed

from .reader import GGUFModel
from .tokenizer import SpecialTokens


@dataclass(frozen=True, slots=True)
class ArchSpec:
    """What differs between architectures when importing."""

    build: Callable[[GGUFModel], dict[str, Any]]
    permutes_qk: bool  # llama.cpp interleaved the rotary rows of Q and K
    norm_offset: float  # llama.cpp stored norm weights as (offset + w)


def _vocab_size(model: GGUFModel) -> int:
    embed = model.tensors.get("token_embd.weight")
    if embed is not None:
        return embed.shape[0]
    return len(model.metadata.get("tokenizer.ggml.tokens", []))


def _common(model: GGUFModel) -> dict[str, Any]:
    hidden = int(model.require("embedding_length"))
    heads = int(model.require("attention.head_count"))
    kv_heads = int(model.arch_field("attention.head_count_kv", heads))
    head_dim = int(model.arch_field("attention.key_length", hidden // heads))
    return {
        "hidden_size": hidden,
        "intermediate_size": int(model.require("feed_forward_length")),
        "num_hidden_layers": int(model.require("block_count")),
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
        "rms_norm_eps": float(model.require("attention.layer_norm_rms_epsilon")),
        "vocab_size": _vocab_size(model),
        "max_position_embeddings": int(model.arch_field("context_length", 2048)),
        # mlx-lm reads rope_theta at the top level and silently falls back to 10000 otherwise.
        "rope_theta": float(model.arch_field("rope.freq_base", 10000.0)),
        "tie_word_embeddings": "output.weight" not in model.tensors,
    }


def _rope_scaling(model: GGUFModel) -> dict[str, Any] | None:
    kind = model.arch_field("rope.scaling.type")
    factor = model.arch_field("rope.scaling.factor")
    if kind in (None, "none") or not factor or float(factor) == 1.0:
        return None
    if kind != "linear":
        raise ImportFailed(f"unsupported rope scaling {kind!r} for {model.arch}")
    return {"rope_type": "linear", "type": "linear", "factor": float(factor)}


def _llama(model: GGUFModel) -> dict[str, Any]:
    config = _common(model)
    if "rope_freqs.weight" in model.tensors:
        raise ImportFailed("llama GGUFs with llama-3 rope frequency factors are not supported")
    config.update(model_type="llama", architectures=["LlamaForCausalLM"])
    config["rope_scaling"] = _rope_scaling(model)
    return config


def _gemma3(model: GGUFModel) -> dict[str, Any]:
    config = _common(model)
    blocks = config["num_hidden_layers"]
    # llama.cpp hard-codes these for Gemma 3: local layers use base 10000, every sixth
    # layer is global, and only the 27B model scales queries by hidden/heads.
    scalar = (
        config["hidden_size"] // config["num_attention_heads"]
        if blocks == 62
        else config["head_dim"]
    )
    config.update(
        model_type="gemma3_text",
        architectures=["Gemma3ForCausalLM"],
        rope_local_base_freq=10000.0,
        query_pre_attn_scalar=scalar,
        sliding_window=int(model.arch_field("attention.sliding_window", 512)),
        sliding_window_pattern=6,
        rope_scaling=_rope_scaling(model),
        final_logit_softcapping=None,
        hidden_activation="gelu_pytorch_tanh",
    )
    return config


def _qwen3(model: GGUFModel) -> dict[str, Any]:
    config = _common(model)
    config.update(model_type="qwen3", architectures=["Qwen3ForCausalLM"])
    config["rope_scaling"] = _rope_scaling(model)
    return config


ARCHS: dict[str, ArchSpec] = {
    "llama": ArchSpec(build=_llama, permutes_qk=True, norm_offset=0.0),
    "gemma3": ArchSpec(build=_gemma3, permutes_qk=False, norm_offset=1.0),
    # llama.cpp keeps Qwen's rotate-half layout (NEOX rope), so nothing to un-permute.
    "qwen3": ArchSpec(build=_qwen3, permutes_qk=False, norm_offset=0.0),
}


def arch_spec(model: GGUFModel) -> ArchSpec:
    spec = ARCHS.get(model.arch)
    if spec is None:
        supported = ", ".join(sorted(ARCHS))
        raise ImportFailed(f"unsupported GGUF architecture {model.arch!r} (supported: {supported})")
    return spec


def write_configs(
    model: GGUFModel,
    dest: Path,
    special: SpecialTokens,
    *,
    torch_dtype: str,
    quantization: dict[str, Any] | None,
    generation_defaults: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    config = arch_spec(model).build(model)
    config["torch_dtype"] = torch_dtype
    if special.bos_id is not None:
        config["bos_token_id"] = special.bos_id
    if special.eos_ids:
        config["eos_token_id"] = (
            special.eos_ids[0] if len(special.eos_ids) == 1 else special.eos_ids
        )
    if special.pad_id is not None:
        config["pad_token_id"] = special.pad_id
    if quantization is not None:
        config["quantization"] = quantization
        config["quantization_config"] = quantization
    source = {
        "name": model.metadata.get("general.name"),
        "file_type": model.metadata.get("general.file_type"),
    }
    if source := {k: v for k, v in source.items() if v is not None}:
        config["gguf_source"] = source
    (dest / "config.json").write_text(json.dumps(config, indent=2))
    generation = {
        key: config[key]
        for key in ("bos_token_id", "eos_token_id", "pad_token_id")
        if key in config
    }
    generation.update(generation_defaults or {})
    (dest / "generation_config.json").write_text(json.dumps(generation, indent=2))
    return config
