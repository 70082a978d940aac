"""A draft's shape for a given target: sensible defaults, each one a flag.

The width is the target's (the draft reads the target's embeddings and feeds its LM
head); attention heads and the MLP size follow the target's own layers unless given.
The depth scales with the target: about one draft layer per eight target layers,
between 1 and 5 (the published drafts use 5 for 36-layer targets).
"""

from __future__ import annotations

from typing import Any

import mlx.nn as nn

from omlx.draft.capture import TargetAdapter
from omlx.draft.config import DEFAULT_DRAFT_BLOCK_SIZE, DFlashConfig
from omlx.draft.random_init import default_layer_ids
from omlx.errors import InvalidRequest


def default_num_layers(num_target_layers: int) -> int:
    return max(1, min(5, int(num_target_layers / 8 + 0.5)))


def _target_args(target: nn.Module) -> dict[str, Any]:
    args = getattr(target, "args", None)
    text = getattr(args, "text_config", None)
    if isinstance(text, dict):
        return text
    return vars(args) if args is not None else {}


def draft_config(
    target: nn.Module,
    *,
    num_layers: int | None = None,
    intermediate_size: int | None = None,
    num_heads: int | None = None,
    num_kv_heads: int | None = None,
    block_size: int = DEFAULT_DRAFT_BLOCK_SIZE,
    target_layer_ids: tuple[int, ...] | None = None,
    mask_token_id: int | None = None,
    rope_from_target: bool = False,
) -> DFlashConfig:
    adapter = TargetAdapter(target, (0,))
    hidden, vocab, depth = adapter.hidden_size, adapter.vocab_size, adapter.num_layers
    args = _target_args(target)
    heads = num_heads or int(args.get("num_attention_heads") or max(1, hidden // 64))
    kv_heads = num_kv_heads or int(args.get("num_key_value_heads") or heads)
    if heads % kv_heads:
        kv_heads = heads
    head_dim = int(args.get("head_dim") or hidden // heads) if not num_heads else hidden // heads
    layers = num_layers or default_num_layers(depth)
    ids = target_layer_ids or default_layer_ids(depth, layers)
    if block_size < 2:
        raise InvalidRequest("the draft block size must be at least 2")
    if any(not 0 <= i < depth for i in ids):
        raise InvalidRequest(f"target layer ids must lie in 0..{depth - 1}")
    return DFlashConfig(
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=head_dim,
        intermediate_size=intermediate_size or int(args.get("intermediate_size") or 3 * hidden),
        vocab_size=vocab,
        num_target_layers=depth,
        target_layer_ids=tuple(ids),
        mask_token_id=vocab - 1 if mask_token_id is None else mask_token_id,
        block_size=block_size,
        rms_norm_eps=float(args.get("rms_norm_eps") or 1e-6),
        # Copied target layers keep the positions they were trained with.
        **(
            {"rope_theta": float(args["rope_theta"])}
            if rope_from_target and args.get("rope_theta")
            else {}
        ),
    )
