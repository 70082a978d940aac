"""Continue a trained draft: its folder's shape and weights are the next run's start.

A device session may be too short to train a draft to the end, and a later one may
bring more data; starting from the last draft's weights (a fresh optimizer and schedule)
keeps what earlier runs learned. The shape is the draft's own: a shape flag that says
otherwise is an error rather than a silent change. The recipe records the start's
weights by digest, so a chain of runs can be followed back.
"""

from __future__ import annotations

import hashlib
from dataclasses import fields
from pathlib import Path
from typing import Any

import mlx.core as mx

from omlx.draft.config import DFlashConfig
from omlx.draft.model import read_weights
from omlx.errors import InvalidRequest

# DraftShape's fields and the DFlashConfig fields they set.
SHAPE_FIELDS = {
    "num_layers": "num_hidden_layers",
    "intermediate_size": "intermediate_size",
    "num_heads": "num_attention_heads",
    "num_kv_heads": "num_key_value_heads",
    "block_size": "block_size",
    "target_layer_ids": "target_layer_ids",
    "mask_token_id": "mask_token_id",
}


def start_config(folder: str | Path, shape: Any) -> DFlashConfig:
    """The trained draft's config; `shape` (a DraftShape) may only repeat it."""
    cfg = DFlashConfig.load(folder)
    if cfg.quantization:
        raise InvalidRequest(f"{folder} is a quantized draft; continue from its float weights")
    wanted = {f.name for f in fields(shape)}
    for name, config_name in SHAPE_FIELDS.items():
        given = getattr(shape, name) if name in wanted else None
        have = getattr(cfg, config_name)
        if given is not None and _normal(given) != _normal(have):
            raise InvalidRequest(
                f"{folder} has {config_name}={_normal(have)}, not {_normal(given)}: "
                "a continued draft keeps its shape (drop the flag or start a new draft)"
            )
    return cfg


def start_weights(folder: str | Path) -> list[tuple[str, mx.array]]:
    return list(read_weights(Path(folder)).items())


def weights_digest(folder: str | Path) -> str:
    h = hashlib.sha256()
    for f in sorted(Path(folder).glob("*.safetensors")):
        h.update(f.name.encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def _normal(value: Any) -> Any:
    return tuple(value) if isinstance(value, (list, tuple)) else value
