"""Tiny in-memory models of real mlx-lm architectures and a BatchGenerator greedy driver."""

from __future__ import annotations

import copy
from typing import Any

import pytest

VOCAB = 128
_COMMON: dict[str, Any] = {
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "rms_norm_eps": 1e-6,
    "vocab_size": VOCAB,
    "max_position_embeddings": 4096,
    "rope_theta": 10000.0,
    "tie_word_embeddings": True,
}
CONFIGS: dict[str, dict[str, Any]] = {
    "llama": {**_COMMON, "model_type": "llama"},
    # Layer 0 slides over the last 8 tokens, layer 1 is global.
    "gemma3": {
        **_COMMON,
        "model_type": "gemma3_text",
        "query_pre_attn_scalar": 16,
        "sliding_window": 8,
        "sliding_window_pattern": 2,
    },
    # Qwen3.5-style: GatedDeltaNet (ArraysCache) in layers 0, 2; attention in 1, 3.
    "hybrid": {
        "model_type": "qwen3_5",
        "tie_word_embeddings": True,
        "vocab_size": VOCAB,
        "text_config": {
            **_COMMON,
            "model_type": "qwen3_5_text",
            "num_hidden_layers": 4,
            "full_attention_interval": 2,
            "linear_num_key_heads": 2,
            "linear_num_value_heads": 4,
            "linear_key_head_dim": 16,
            "linear_value_head_dim": 16,
            "linear_conv_kernel_dim": 4,
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0,
                                "partial_rotary_factor": 0.25},
        },
    },
}  # fmt: skip


def build_model(arch: str, seed: int = 0) -> Any:
    """A seeded float32 model; projections widened so greedy output depends on the prompt."""
    import mlx.core as mx
    from mlx.utils import tree_flatten, tree_unflatten
    from mlx_lm.utils import _get_classes

    config = copy.deepcopy(CONFIGS[arch])
    model_class, args_class = _get_classes(config)
    mx.random.seed(seed)
    model = model_class(args_class.from_dict(config))
    weights = [
        (k, (v * 4.0 if v.ndim == 2 and "embed" not in k else v).astype(mx.float32))
        for k, v in tree_flatten(model.parameters())
    ]
    model.update(tree_unflatten(weights))
    mx.eval(model.parameters())
    return model


@pytest.fixture(scope="session", params=["llama", "gemma3", "hybrid"])
def tiny_model(request: pytest.FixtureRequest) -> tuple[str, Any]:
    return request.param, build_model(request.param)


def greedy(
    model: Any,
    prompt: list[int],
    max_tokens: int,
    cache: list | None = None,
    num_cached: int = 0,
) -> tuple[list[int], list, list[int]]:
    """Greedy-generate through BatchGenerator as the engine does.

    Returns (generated ids, the sequence's extracted cache, the tokens its KV holds).
    """
    from mlx_lm.generate import BatchGenerator

    gen = BatchGenerator(model, max_tokens=max_tokens, stop_tokens=[], prefill_step_size=64)
    (uid,) = gen.insert(
        [prompt[num_cached:]],
        max_tokens=[max_tokens],
        caches=[cache] if cache is not None else None,
        all_tokens=[prompt[:num_cached]] if cache is not None else None,
    )
    out: list[int] = []
    while True:
        for r in gen.next_generated():
            assert r.uid == uid
            out.append(r.token)
            if r.finish_reason is not None:
                gen.close()
                return out, r.prompt_cache, r.all_tokens
