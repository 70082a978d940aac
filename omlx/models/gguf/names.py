"""llama.cpp tensor names to the Hugging Face names mlx-lm's models load."""

from __future__ import annotations

import re

import numpy as np

from omlx.errors import ImportFailed

_TOP_LEVEL = {
    "token_embd": "model.embed_tokens",
    "output_norm": "model.norm",
    "output": "lm_head",
}

_BLOCK = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}

# Gemma 3 wraps both sub-blocks in pre- and post-norms, so llama.cpp's ffn_norm is the
# pre-feed-forward norm there, not the post-attention one.
_BLOCK_BY_ARCH = {
    "gemma3": {
        "ffn_norm": "pre_feedforward_layernorm",
        "post_attention_norm": "post_attention_layernorm",
        "post_ffw_norm": "post_feedforward_layernorm",
    },
}

# Tensors llama.cpp derives from the config (llama-3 rope factors): nothing to load.
_DERIVED = frozenset({"rope_freqs"})

_BLOCK_RE = re.compile(r"^blk\.(\d+)\.([a-z_0-9]+)\.(weight|bias)$")
_TOP_RE = re.compile(r"^([a-z_0-9]+)\.(weight|bias)$")


def hf_name(gguf_name: str, arch: str) -> str | None:
    """The HF name for a GGUF tensor, or None for tensors that carry nothing to load."""
    if m := _BLOCK_RE.match(gguf_name):
        layer, base, suffix = m.groups()
        table = {**_BLOCK, **_BLOCK_BY_ARCH.get(arch, {})}
        if base in table:
            return f"model.layers.{layer}.{table[base]}.{suffix}"
    elif m := _TOP_RE.match(gguf_name):
        base, suffix = m.groups()
        if base in _DERIVED:
            return None
        if base in _TOP_LEVEL:
            return f"{_TOP_LEVEL[base]}.{suffix}"
    raise ImportFailed(f"unsupported tensor {gguf_name!r} for architecture {arch!r}")


def unpermute_rotary_rows(rows: np.ndarray, num_heads: int) -> np.ndarray:
    """Undo llama.cpp's Q/K row permutation (interleaved rotary pairs -> rotate-half halves).

    Rows are output features, so this applies unchanged to a float weight and to the
    quantized weight, scales and biases of the same projection.
    """
    n, rest = rows.shape[0], rows.shape[1:]
    if n % (2 * num_heads):
        raise ImportFailed(f"cannot un-permute {n} rows across {num_heads} heads")
    split = rows.reshape(num_heads, n // num_heads // 2, 2, *rest)
    return split.swapaxes(1, 2).reshape(n, *rest)


def permute_rotary_rows(rows: np.ndarray, num_heads: int) -> np.ndarray:
    """llama.cpp's forward permutation (its HF-to-GGUF converter); tests check the inverse."""
    n, rest = rows.shape[0], rows.shape[1:]
    split = rows.reshape(num_heads, 2, n // num_heads // 2, *rest)
    return split.swapaxes(1, 2).reshape(n, *rest)
