"""The DFlash draft model in MLX: Qwen3-style layers attending to projected target context.

In every layer the queries come from the draft block, the keys and values from
[projected target context ; draft block], with no causal mask inside the block. The
context K/V live in a per-layer KVCache; the block's own K/V are never stored. The
cache receives committed context, or (when the loop drafts before reading the verify
back) a whole verify block's rows of which only a device-side count are committed: the
rest stay hidden by a mask until the loop trims them.
"""

from __future__ import annotations

import glob
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn

from omlx.draft.config import DFlashConfig
from omlx.draft.vocab import DraftVocab, read_vocab
from omlx.errors import InvalidRequest
from omlx.mlx_lm_compat import KVCache, initialize_rope, swiglu
from omlx.mlx_lm_compat.attention_kernel import kernel_attention, takes_kernel
from omlx.mlx_lm_compat.row_attention import row_attention, takes_rows


def _block_attention(
    q: mx.array, k: mx.array, v: mx.array, scale: float, keep: mx.array | None = None
) -> mx.array:
    """Attention of a few queries over all keys (those `keep` marks, if given), as plain
    matmuls.

    Not mx.fast.scaled_dot_product_attention: on CUDA it sends multi-query attention to
    cuDNN, whose graph is rebuilt for every new key length, i.e. every DFlash cycle.
    """
    b, num_heads, n, d = q.shape
    num_kv = k.shape[1]
    q = (q * scale).reshape(b, num_kv, num_heads // num_kv, n, d)
    scores = q @ mx.expand_dims(k, 2).swapaxes(-1, -2)
    if keep is not None:  # the block's own keys are always kept, so no row is empty
        scores = mx.where(keep, scores, mx.array(-mx.inf, dtype=scores.dtype))
    probs = mx.softmax(scores, axis=-1, precise=True)
    return (probs @ mx.expand_dims(v, 2)).reshape(b, num_heads, n, d)


class DraftAttention(nn.Module):
    # Set by use_row_gemv (engine.row_gemv): the block's queries as batched gemvs.
    attends_by_rows = False
    # Set by use_kernel_attention (CUDA only): the block's attention as omlx's kernel,
    # one launch a layer; it goes before the rows when both are set.
    attends_by_kernel = False

    def __init__(self, cfg: DFlashConfig) -> None:
        super().__init__()
        dim, head_dim = cfg.hidden_size, cfg.head_dim
        self.num_heads = cfg.num_attention_heads
        self.num_kv_heads = cfg.num_key_value_heads
        self.scale = head_dim**-0.5
        bias = cfg.attention_bias
        self.q_proj = nn.Linear(dim, self.num_heads * head_dim, bias=bias)
        self.k_proj = nn.Linear(dim, self.num_kv_heads * head_dim, bias=bias)
        self.v_proj = nn.Linear(dim, self.num_kv_heads * head_dim, bias=bias)
        self.o_proj = nn.Linear(self.num_heads * head_dim, dim, bias=False)
        self.q_norm = nn.RMSNorm(head_dim, eps=cfg.rms_norm_eps)
        self.k_norm = nn.RMSNorm(head_dim, eps=cfg.rms_norm_eps)
        self.rope = initialize_rope(
            head_dim,
            base=cfg.rope_theta,
            traditional=False,
            scaling_config=cfg.rope_scaling,
            max_position_embeddings=cfg.max_position_embeddings,
        )

    def _keys_values(self, x: mx.array, offset: int | mx.array) -> tuple[mx.array, mx.array]:
        b, n, _ = x.shape
        keys = self.k_norm(self.k_proj(x).reshape(b, n, self.num_kv_heads, -1))
        values = self.v_proj(x).reshape(b, n, self.num_kv_heads, -1)
        keys = self.rope(keys.transpose(0, 2, 1, 3), offset=offset)
        return keys, values.transpose(0, 2, 1, 3)

    def __call__(
        self,
        x: mx.array,
        context: mx.array,
        cache: KVCache,
        num_valid: mx.array | None = None,
    ) -> mx.array:
        b, n, _ = x.shape
        # New context sits at positions cache.offset.., the block after its valid rows.
        start = cache.offset
        ctx_keys, ctx_values = self._keys_values(context, start)
        ctx_keys, ctx_values = cache.update_and_fetch(ctx_keys, ctx_values)
        position: int | mx.array = cache.offset
        keep = None
        if num_valid is not None:  # rows of `context` past num_valid are hidden
            position = start + num_valid
            key_index = mx.arange(ctx_keys.shape[2] + n)
            keep = (key_index < position) | (key_index >= ctx_keys.shape[2])
        queries = self.q_norm(self.q_proj(x).reshape(b, n, self.num_heads, -1))
        queries = self.rope(queries.transpose(0, 2, 1, 3), offset=position)
        block_keys, block_values = self._keys_values(x, position)
        keys = mx.concatenate([ctx_keys, block_keys], axis=2)
        values = mx.concatenate([ctx_values, block_values], axis=2)
        if self.attends_by_kernel and takes_kernel(queries, keys, values, keep):
            out = kernel_attention(queries, keys, values, self.scale, keep)
        elif self.attends_by_rows and takes_rows(queries, keys, values, keep):
            out = row_attention(queries, keys, values, self.scale, keep)
        else:
            out = _block_attention(queries, keys, values, self.scale, keep)
        return self.o_proj(out.transpose(0, 2, 1, 3).reshape(b, n, -1))


class DraftMLP(nn.Module):
    def __init__(self, dim: int, hidden_dim: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(dim, hidden_dim, bias=False)
        self.down_proj = nn.Linear(hidden_dim, dim, bias=False)
        self.up_proj = nn.Linear(dim, hidden_dim, bias=False)

    def __call__(self, x: mx.array) -> mx.array:
        return self.down_proj(swiglu(self.gate_proj(x), self.up_proj(x)))


class DraftLayer(nn.Module):
    def __init__(self, cfg: DFlashConfig) -> None:
        super().__init__()
        self.self_attn = DraftAttention(cfg)
        self.mlp = DraftMLP(cfg.hidden_size, cfg.intermediate_size)
        self.input_layernorm = nn.RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)
        self.post_attention_layernorm = nn.RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)

    def __call__(
        self, x: mx.array, context: mx.array, cache: KVCache, num_valid: mx.array | None = None
    ) -> mx.array:
        h = x + self.self_attn(self.input_layernorm(x), context, cache, num_valid)
        return h + self.mlp(self.post_attention_layernorm(h))


class DFlashDraftModel(nn.Module):
    """Draft network without embedding or LM head: the target lends both (the head over
    `vocab` only, when the folder has a draft vocabulary)."""

    vocab: DraftVocab | None = None

    def __init__(self, cfg: DFlashConfig) -> None:
        super().__init__()
        self.config = cfg
        num_captured = len(cfg.target_layer_ids)
        self.fc = nn.Linear(num_captured * cfg.hidden_size, cfg.hidden_size, bias=False)
        self.hidden_norm = nn.RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)
        self.layers = [DraftLayer(cfg) for _ in range(cfg.num_hidden_layers)]
        self.norm = nn.RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)

    def make_cache(self) -> list[KVCache]:
        return [KVCache() for _ in self.layers]

    @property
    def takes_device_positions(self) -> bool:
        """Whether the block's position may be a device scalar (`num_valid`): MLX's own
        RoPE takes an array offset; a scaled variant may read it on the host."""
        return all(type(layer.self_attn.rope) is nn.RoPE for layer in self.layers)

    def __call__(
        self,
        block_embeddings: mx.array,
        target_hidden: mx.array,
        cache: list[KVCache],
        num_valid: mx.array | None = None,
    ) -> mx.array:
        """Hidden states of the draft block (before the target's LM head).

        Args:
            block_embeddings: [B, block, hidden] target embeddings of the draft block.
            target_hidden: [B, new, hidden * num captured layers] captured target states
                of the context committed since the last call (at least one position).
            cache: this request's context cache, from `make_cache`.
            num_valid: a device scalar, when only the first `num_valid` rows of
                `target_hidden` are committed (a verify not yet read back: the loop
                drafts before it knows what the target accepted). The other rows are
                cached but hidden from attention, the block sits right after the valid
                ones, and the caller trims the hidden rows off once it knows their count.
        """
        context = self.hidden_norm(self.fc(target_hidden))
        h = block_embeddings
        for layer, layer_cache in zip(self.layers, cache, strict=True):
            h = layer(h, context, layer_cache, num_valid)
        return self.norm(h)


def read_weights(path: Path) -> dict[str, mx.array]:
    files = sorted(glob.glob(str(path / "*.safetensors")))
    if not files:
        raise InvalidRequest(f"no *.safetensors weights in DFlash draft folder {path}")
    weights: dict[str, mx.array] = {}
    for file in files:
        weights.update(mx.load(file))
    # Some exports nest everything under "model."; the published drafts do not.
    return {k.removeprefix("model."): v for k, v in weights.items()}


def load_draft(path: str | Path, dtype: mx.Dtype | None = None) -> DFlashDraftModel:
    """Load a DFlash draft checkpoint folder (config.json + safetensors)."""
    folder = Path(path)
    cfg = DFlashConfig.load(folder)
    model = DFlashDraftModel(cfg)
    weights = read_weights(folder)
    if cfg.quantization:
        quant: dict[str, Any] = cfg.quantization
        nn.quantize(
            model,
            group_size=quant.get("group_size", 64),
            bits=quant.get("bits", 4),
            class_predicate=lambda p, _m: f"{p}.scales" in weights,
        )
    try:
        model.load_weights(list(weights.items()), strict=True)
    except ValueError as exc:
        raise InvalidRequest(f"DFlash draft weights in {folder} do not match: {exc}") from exc
    if dtype is not None:
        model.set_dtype(dtype)
    mx.eval(model.parameters())
    model.eval()
    model.vocab = read_vocab(folder)
    return model
