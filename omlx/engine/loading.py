"""Loading one text model for an engine (engine thread, MLX)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import mlx.nn as nn
from mlx.utils import tree_flatten

from omlx.engine.text.templating import ModelSpec, context_length
from omlx.errors import ImportFailed
from omlx.models.generation_config import read_generation_config, sampling_defaults_from
from omlx.platform.cpu_precision import compute_in_float32
from omlx.platform.weight_layout import use_input_major_linears, wants_input_major

log = logging.getLogger(__name__)


@dataclass(slots=True)
class LoadedModel:
    model: nn.Module
    tokenizer: Any  # mlx-lm TokenizerWrapper
    spec: ModelSpec
    eos_token_ids: frozenset[int]
    weight_bytes: int
    # generation_config.json's sampling keys: what a request that sets none samples with
    sampling_defaults: dict[str, float | int] = field(default_factory=dict)


def load_text_model(
    name: str,
    path: Path,
    *,
    fuse_projections: bool = False,
    cpu_float32: Literal["auto", "off", "on"] = "off",
    row_gemv: Literal["off", "small_models", "on"] = "off",
) -> LoadedModel:
    """mlx_lm.load plus what the engine needs: EOS ids (config and generation_config),
    the sampling defaults (generation_config), the context window and the vocabulary size.
    `fuse_projections`: sibling projections as one matmul (engine.fused_projections);
    `cpu_float32`: half-precision parameters cast to float32 on a CPU (engine.cpu_float32);
    `row_gemv`: a few rows as one batched gemv (engine.row_gemv, resolved for the device)."""
    from omlx.mlx_lm_compat import load, warn_if_unchecked

    warn_if_unchecked()
    try:
        model, tokenizer, config = load(str(path), return_config=True)
    except (FileNotFoundError, ValueError) as e:
        raise ImportFailed(f"cannot load model {name!r} from {path}: {e}") from e
    compute_in_float32(model, cpu_float32, name)  # first: fused, swapped layers follow it
    if fuse_projections:  # before the layout swap, which then takes the fused layers too
        from omlx.mlx_lm_compat.fused_projections import fuse_projections as fuse

        log.debug("model %s: %d projection groups fused", name, fuse(model))
    if row_gemv != "off":  # after fusing (the fused linears too), before the CPU layout
        from omlx.mlx_lm_compat.row_gemv import use_row_gemv

        swapped = use_row_gemv(model, all_or_none=row_gemv == "small_models")
        log.debug("model %s: %d linears compute a few rows as one gemv", name, swapped)
    if wants_input_major():
        swapped = use_input_major_linears(model)
        log.debug("model %s: %d linears stored input-major", name, swapped)
    generation = read_generation_config(path)
    eos = set(tokenizer.eos_token_ids) | _eos_ids(generation.get("eos_token_id"))
    tokenizer.eos_token_ids = eos
    text_config = config.get("text_config") or {}
    vocab = text_config.get("vocab_size") or config.get("vocab_size") or len(tokenizer)
    template = getattr(tokenizer, "chat_template", None)
    spec = ModelSpec(
        name=name,
        model_type=config.get("model_type"),
        context_length=context_length(config),
        vocab_size=int(vocab),
        chat_template=template if isinstance(template, str) else None,
    )
    weight_bytes = sum(v.nbytes for _, v in tree_flatten(model.parameters()))
    defaults = sampling_defaults_from(generation, source=str(path))
    log.info(
        "loaded model %s from %s (%.1f MB; sampling defaults: %s)",
        name, path, weight_bytes / 1e6,
        ", ".join(f"{k}={v}" for k, v in defaults.items()) or "none",
    )  # fmt: skip
    return LoadedModel(model, tokenizer, spec, frozenset(eos), weight_bytes, defaults)


def _eos_ids(value: object) -> set[int]:
    if isinstance(value, int):
        return {value}
    if not isinstance(value, list):
        return set()
    return {v for v in value if isinstance(v, int)}
