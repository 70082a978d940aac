"""Target-side DFlash hooks: hidden-state capture, verify tapes and cache rollback.

No installed mlx-lm file is edited. While a DFlash forward runs, the entries of the
target's decoder-layer list are swapped for thin proxies that record the outputs of the
configured layers, and (in verify) hybrid layers' recurrent mixers for tape recorders;
both are swapped back before the call returns, so the batched path sharing the model
sees the original modules.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import mlx.core as mx
import mlx.nn as nn

from omlx.draft.tape import GatedDeltaTape, TapeGatedDeltaNet, can_tape
from omlx.errors import DraftMismatch
from omlx.mlx_lm_compat import ArraysCache, KVCache, make_prompt_cache
from omlx.mlx_lm_compat.attention_kernel import kernel_takes_verifies, takes_causal, verifying
from omlx.mlx_lm_compat.decoder import decoder_stack

# Inputs up to this long (verify blocks) see keys padded to a multiple of this width.
MAX_BUCKETED_TOKENS = 64
KEY_BUCKET_TOKENS = 256


def _bucket(n: int) -> int:
    return -(-n // KEY_BUCKET_TOKENS) * KEY_BUCKET_TOKENS


class VerifyKVCache(KVCache):
    """A KVCache that shows short inputs keys padded to a bucket width, with array masks.

    On CUDA, MLX's multi-query attention (cuDNN for "causal", a JIT-compiled fallback for
    array masks) is rebuilt for every new key length: measured 50-120 ms per DFlash
    verify on an H200, since each cycle's key length is new. Padding the keys to a
    multiple of KEY_BUCKET_TOKENS (masked out) makes the shapes repeat. Long inputs
    (prefill chunks) keep the stock path.
    """

    def make_mask(
        self, n: int, *, return_array: bool = False, window_size: int | None = None
    ) -> Any:
        if n > MAX_BUCKETED_TOKENS:
            return super().make_mask(n, return_array=return_array, window_size=window_size)
        positions = self.offset + mx.arange(n)[:, None]
        keys = mx.arange(_bucket(self.offset + n))[None]
        mask = keys <= positions
        if window_size is not None:
            mask = mask & (keys > positions - window_size)
        return mask

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        n = keys.shape[2]
        if n > MAX_BUCKETED_TOKENS:
            return super().update_and_fetch(keys, values)
        prev = self.offset
        width = _bucket(prev + n)
        if self.keys is None or self.keys.shape[2] < width:
            b, h, _, dk = keys.shape
            new_keys = mx.zeros((b, h, width, dk), keys.dtype)
            new_values = mx.zeros((b, h, width, values.shape[3]), values.dtype)
            if self.keys is not None and prev:
                new_keys[..., :prev, :] = self.keys[..., :prev, :]
                new_values[..., :prev, :] = self.values[..., :prev, :]
            self.keys, self.values = new_keys, new_values
        self.offset += n
        self.keys[..., prev : self.offset, :] = keys
        self.values[..., prev : self.offset, :] = values
        return self.keys[..., :width, :], self.values[..., :width, :]


class _CaptureLayer(nn.Module):
    """Calls the wrapped decoder layer and keeps its output hidden state."""

    def __init__(self, inner: nn.Module, sink: dict[int, mx.array], index: int) -> None:
        super().__init__()
        self.inner = inner
        self._sink = sink
        self._index = index

    def __getattr__(self, name: str) -> Any:
        # Model loops read layer flags such as qwen3_5's `is_linear`.
        try:
            return super().__getattr__(name)
        except AttributeError:
            if "inner" not in self:
                raise
            return getattr(self["inner"], name)

    def __call__(self, x: mx.array, *args: Any, **kwargs: Any) -> mx.array:
        out = self.inner(x, *args, **kwargs)
        self._sink[self._index] = out
        return out


def _text_model(model: nn.Module) -> nn.Module:
    """The inner decoder stack (`model.model`), for llama, qwen2/3 and qwen3_5 alike."""
    inner = decoder_stack(model)
    if inner is None:
        raise DraftMismatch(f"DFlash cannot find the decoder layers of {type(model).__name__}")
    return inner


class TargetAdapter:
    """A loaded mlx-lm target seen through DFlash: forward with capture, embed, LM head."""

    def __init__(self, model: nn.Module, layer_ids: Sequence[int]) -> None:
        self.model = model
        self.layer_ids = tuple(layer_ids)
        text = _text_model(model)
        self._text = text
        self._layers: list[nn.Module] = text.layers
        self._embed = text.embed_tokens
        outer = getattr(model, "language_model", model)
        self._lm_head = getattr(outer, "lm_head", None)
        self.hidden_size = int(self._embed.weight.shape[1])
        self.vocab_size = int(
            self._lm_head.weight.shape[0]
            if self._lm_head is not None
            else self._embed.weight.shape[0]
        )
        if hasattr(self._embed, "scales"):  # quantized embedding keeps packed weights
            self.hidden_size = int(self._embed.scales.shape[1] * self._embed.group_size)
            self.vocab_size = int(self._embed.scales.shape[0])

    @property
    def dtype(self) -> mx.Dtype:
        """What the target computes in (a quantized embedding's scales carry it)."""
        return getattr(self._embed, "scales", self._embed.weight).dtype

    @property
    def num_layers(self) -> int:
        return len(self._layers)

    @property
    def layers(self) -> list[nn.Module]:
        return self._layers

    @property
    def final_norm(self) -> nn.Module | None:
        """The norm before the LM head (what a draft's own final norm stands in for)."""
        return getattr(self._text, "norm", None)

    def make_cache(self) -> list[Any]:
        # Key buckets keep MLX's attention from rebuilding its kernels each cycle; omlx's
        # kernel compiles once whatever the key length, so it gets the keys in use under
        # a "causal" mask (no masked bucket tail to walk, no mask array to build). Every
        # kernel cycle timed on an H100 (dflash_verify_h100_s19, calls 2-5: 1.72-1.85
        # plain tokens a cycle) ran this way; the one bucketed run, on another machine of
        # the same kind, took 1.95 (call 1).
        bucketed = not (kernel_takes_verifies(self.model) and takes_causal(self.dtype))
        cache = [
            VerifyKVCache() if type(c) is KVCache and bucketed else c
            for c in make_prompt_cache(self.model)
        ]
        for layer, layer_cache in zip(self._layers, cache, strict=True):
            if type(layer_cache) not in (VerifyKVCache, KVCache, ArraysCache):
                raise DraftMismatch(
                    f"DFlash cannot roll back a {type(layer_cache).__name__} "
                    "(sliding-window or quantized caches are not supported)"
                )
            if type(layer_cache) is ArraysCache and not can_tape(
                getattr(layer, "linear_attn", None)
            ):
                raise DraftMismatch(
                    f"DFlash has no tape replay for the recurrent layers of "
                    f"{type(self.model).__name__}"
                )
        return cache

    def embed(self, ids: mx.array) -> mx.array:
        return self._embed(ids)

    @property
    def head_module(self) -> nn.Module:
        """The module behind `lm_head`: the LM head, or the tied embedding."""
        return self._lm_head if self._lm_head is not None else self._embed

    def lm_head(self, hidden: mx.array) -> mx.array:
        if self._lm_head is not None:
            return self._lm_head(hidden)
        return self._embed.as_linear(hidden)

    def forward(
        self,
        ids: mx.array,
        cache: list[Any],
        *,
        record_tape: bool = False,
        with_logits: bool = True,
    ) -> tuple[mx.array | None, mx.array, list[GatedDeltaTape]]:
        """Run the target over `ids` [1, L]: logits, captured hidden states, tapes.

        The captured states are the outputs of the configured layers, concatenated in
        `layer_ids` order on the last axis: [1, L, hidden * len(layer_ids)]. Without
        logits only the decoder stack runs (prefill chunks need no [L, vocab] logits).
        """
        sink: dict[int, mx.array] = {}
        tapes: list[GatedDeltaTape] = []
        # verifying(): where the engine patched only batched decode steps for omlx's
        # attention kernel, this pass's few-query attention takes it too.
        with self._hooks(sink, tapes if record_tape else None), verifying():
            if with_logits:
                logits = self.model(ids, cache=cache)
            else:
                logits = None
                self._text(ids, cache=cache)
        hidden = mx.concatenate([sink[i] for i in self.layer_ids], axis=-1)
        return logits, hidden, tapes

    @contextmanager
    def _hooks(
        self, sink: dict[int, mx.array], tapes: list[GatedDeltaTape] | None
    ) -> Iterator[None]:
        originals = list(self._layers)
        swapped_mixers: list[tuple[nn.Module, nn.Module]] = []
        try:
            for i in set(self.layer_ids):
                self._layers[i] = _CaptureLayer(originals[i], sink, i)
            if tapes is not None:
                for layer in originals:
                    mixer = getattr(layer, "linear_attn", None)
                    if mixer is None:
                        continue
                    if not can_tape(mixer):
                        raise DraftMismatch(
                            f"DFlash has no tape replay for {type(mixer).__name__} layers"
                        )
                    layer.linear_attn = TapeGatedDeltaNet(mixer, tapes)
                    swapped_mixers.append((layer, mixer))
            yield
        finally:
            self._layers[:] = originals
            for layer, mixer in swapped_mixers:
                layer.linear_attn = mixer

    def rollback(
        self, cache: list[Any], tapes: list[GatedDeltaTape], num_keep: int, num_block: int
    ) -> None:
        """Undo the last `num_block - num_keep` verify tokens in every layer's cache."""
        num_drop = num_block - num_keep
        if num_drop <= 0:
            return
        for layer_cache in cache:
            if isinstance(layer_cache, KVCache):
                layer_cache.trim(num_drop)
        for tape in tapes:
            tape.replay(num_keep)
        mx.eval([c.state for c in cache if isinstance(c, ArraysCache)])
