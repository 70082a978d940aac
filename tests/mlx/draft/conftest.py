"""Tiny random targets and drafts for the DFlash tests (float32, in memory)."""

from __future__ import annotations

import importlib
from typing import Any

import mlx.core as mx
import pytest
from mlx.utils import tree_map

VOCAB = 256

_ARGS: dict[str, dict[str, Any]] = {
    "llama": {
        "model_type": "llama",
        "hidden_size": 64,
        "num_hidden_layers": 4,
        "intermediate_size": 128,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "rms_norm_eps": 1e-5,
        "vocab_size": VOCAB,
        "tie_word_embeddings": False,
    },
    "qwen3": {
        "model_type": "qwen3",
        "hidden_size": 64,
        "num_hidden_layers": 4,
        "intermediate_size": 128,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "rms_norm_eps": 1e-6,
        "vocab_size": VOCAB,
        "max_position_embeddings": 4096,
        "rope_theta": 10000.0,
        "tie_word_embeddings": True,
    },
    "qwen3_5": {
        "model_type": "qwen3_5",
        "text_config": {
            "model_type": "qwen3_5_text",
            "hidden_size": 64,
            "num_hidden_layers": 4,
            "intermediate_size": 128,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 16,
            "vocab_size": VOCAB,
            "linear_num_value_heads": 4,
            "linear_num_key_heads": 2,
            "linear_key_head_dim": 16,
            "linear_value_head_dim": 16,
            "linear_conv_kernel_dim": 4,
            "full_attention_interval": 2,
            "tie_word_embeddings": False,
        },
    },
}


def build_target(arch: str, seed: int = 0, **overrides: Any):
    """A seeded random mlx-lm model of a real architecture (float32)."""
    module = importlib.import_module(f"mlx_lm.models.{arch}")
    args = {**_ARGS[arch], **overrides}
    mx.random.seed(seed)
    model = module.Model(module.ModelArgs.from_dict(args))
    # At default init the token embedding dominates the residual stream and greedy
    # decoding repeats one token; stronger layer weights give varied continuations.
    for layer in model.model.layers:
        layer.update(tree_map(lambda w: w * 4 if w.ndim == 2 else w, layer.parameters()))
    mx.eval(model.parameters())
    model.eval()
    return model


@pytest.fixture(scope="session", params=["llama", "qwen3", "qwen3_5"])
def tiny_target(request):
    return request.param, build_target(request.param)
