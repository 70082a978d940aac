"""Build a random-weight DFlash draft that fits a given target (for tests and benches).

A random draft is the worst case for acceptance (τ close to 1), so it exercises every
phase of the loop; real speedups need a trained draft.
"""

from __future__ import annotations

import json
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten

from omlx.draft.capture import TargetAdapter
from omlx.draft.config import DEFAULT_DRAFT_BLOCK_SIZE, DFlashConfig
from omlx.draft.model import DFlashDraftModel


def default_layer_ids(num_target_layers: int, num_draft_layers: int) -> tuple[int, ...]:
    """Evenly spaced target layers from 1 to num_target_layers - 3, as the paper picks."""
    if num_draft_layers == 1 or num_target_layers < 4:
        return (num_target_layers // 2,)
    start, end = 1, num_target_layers - 3
    span = end - start
    return tuple(round(start + i * span / (num_draft_layers - 1)) for i in range(num_draft_layers))


def draft_config_for(
    target: nn.Module,
    *,
    num_layers: int = 2,
    block_size: int = DEFAULT_DRAFT_BLOCK_SIZE,
    mask_token_id: int | None = None,
    layer_ids: tuple[int, ...] | None = None,
) -> DFlashConfig:
    """A draft config whose sizes fit `target` (an mlx-lm model)."""
    adapter = TargetAdapter(target, (0,))
    hidden = adapter.hidden_size
    num_heads = max(1, hidden // 64) if hidden >= 64 else 1
    return DFlashConfig(
        hidden_size=hidden,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_heads,
        head_dim=hidden // num_heads,
        intermediate_size=2 * hidden,
        vocab_size=adapter.vocab_size,
        num_target_layers=adapter.num_layers,
        target_layer_ids=layer_ids or default_layer_ids(adapter.num_layers, num_layers),
        mask_token_id=adapter.vocab_size - 1 if mask_token_id is None else mask_token_id,
        block_size=block_size,
    )


def random_draft(
    cfg: DFlashConfig, seed: int = 0, dtype: mx.Dtype = mx.float32
) -> DFlashDraftModel:
    mx.random.seed(seed)
    model = DFlashDraftModel(cfg)
    model.set_dtype(dtype)
    mx.eval(model.parameters())
    return model


def save_draft(model: DFlashDraftModel, dest: str | Path) -> Path:
    """Write config.json + model.safetensors in the published checkpoints' layout."""
    folder = Path(dest)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(model.config.to_dict(), indent=2))
    mx.save_safetensors(str(folder / "model.safetensors"), dict(tree_flatten(model.parameters())))
    return folder
