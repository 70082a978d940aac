"""Slice a finished request's mlx-lm prompt cache into blocks, and rebuild caches from blocks.

The only cache module that imports MLX. Blocks leave here as numpy arrays (evaluated,
copied out of MLX on the engine thread) so the hot tier, the cold writer thread and the
disk never hold MLX objects; `rebuild` turns them back into mlx-lm cache objects.

Per layer kind (see `ModelLayout`):
- kv / quantized: every block carries the layer's keys and values for its tokens.
- rotating (sliding window, keep=0): a block carries them only if its tokens were still in
  the window when the request finished; a prefix is reusable only if the window's span
  before its end is covered (index.ReuseRule).
- arrays (recurrent state, e.g. GatedDeltaNet): the state exists only at the end of what
  was processed, so it is stored with the last block only when that end falls exactly on
  a block boundary; a prefix is reusable only if it ends at a block carrying a snapshot.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import mlx.core as mx
import numpy as np

from omlx.mlx_lm_compat import (
    ArraysCache,
    KVCache,
    QuantizedKVCache,
    RotatingKVCache,
    make_prompt_cache,
)
from omlx.mlx_lm_compat.cache_internals import restore_rotating, rotating_in_order

KV, QUANTIZED, ROTATING, ARRAYS = "kv", "quantized", "rotating", "arrays"


class UnsupportedCache(Exception):
    """A cache layout this module cannot slice (the model then runs uncached)."""


@dataclass(frozen=True, slots=True)
class LayerSpec:
    kind: str
    params: dict[str, int] = field(default_factory=dict)  # max_size, group_size, bits, size


@dataclass(frozen=True, slots=True)
class ModelLayout:
    layers: tuple[LayerSpec, ...]

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    @property
    def needs_state(self) -> bool:
        return any(s.kind == ARRAYS for s in self.layers)

    @property
    def window_tokens(self) -> int:
        return max((s.params["max_size"] for s in self.layers if s.kind == ROTATING), default=0)

    @property
    def cache_types(self) -> list[str]:
        return [s.kind for s in self.layers]

    @property
    def token_granular(self) -> bool:
        """Every layer holds every token's KV, so any token count is a reusable prefix.

        Not so for sliding windows (a window's span must be covered) or recurrent state
        (it exists only at the end of what was processed).
        """
        return all(s.kind in (KV, QUANTIZED) for s in self.layers)


@dataclass(slots=True)
class SlicedBlock:
    block_index: int
    arrays: dict[str, np.ndarray]
    has_window: bool
    has_state: bool
    num_tokens: int

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.arrays.values())


def layer_spec(cache: Any) -> LayerSpec:
    if type(cache) is KVCache:
        return LayerSpec(KV)
    if type(cache) is QuantizedKVCache:
        return LayerSpec(QUANTIZED, {"group_size": cache.group_size, "bits": cache.bits})
    if type(cache) is RotatingKVCache:
        if cache.keep:
            raise UnsupportedCache("RotatingKVCache with keep > 0 (attention sinks)")
        return LayerSpec(ROTATING, {"max_size": cache.max_size})
    if type(cache) is ArraysCache:
        return LayerSpec(ARRAYS, {"size": len(cache.cache)})
    raise UnsupportedCache(f"{type(cache).__name__} cannot be sliced into blocks")


def model_layout(model: Any) -> ModelLayout:
    """The layer kinds of `model`'s prompt cache; raises UnsupportedCache."""
    return ModelLayout(tuple(layer_spec(c) for c in make_prompt_cache(model)))


def layout_meta(layout: ModelLayout, dtype: str, bf16_names: list[str]) -> dict[str, str]:
    """The slicer's part of a block file's metadata."""
    return {
        "num_layers": str(layout.num_layers),
        "dtype": dtype,
        "cache_types": json.dumps(layout.cache_types),
        "layers": json.dumps([s.params for s in layout.layers]),
        "bf16": json.dumps(sorted(bf16_names)),
    }


def check_meta(layout: ModelLayout, meta: dict[str, str]) -> bool:
    """Whether a stored block's layout fits this model's layout."""
    try:
        return (
            int(meta["num_layers"]) == layout.num_layers
            and json.loads(meta["cache_types"]) == layout.cache_types
            and json.loads(meta["layers"]) == [s.params for s in layout.layers]
        )
    except (KeyError, ValueError, TypeError):
        return False


def processed_tokens(prompt_cache: list[Any]) -> int | None:
    """Tokens the cache has processed, read from its attention layers (None if it has none)."""
    for c in prompt_cache:
        if isinstance(c, (KVCache, QuantizedKVCache, RotatingKVCache)):
            return int(c.offset)
    return None


def _bits(a: mx.array, bf16: bool) -> mx.array:
    """What the host reads: bfloat16 (which numpy lacks) as its uint16 bit pattern."""
    return a.view(mx.uint16) if bf16 else a


def slice_blocks(
    prompt_cache: list[Any],
    layout: ModelLayout,
    *,
    num_tokens: int,
    block_size: int,
    first_block: int = 0,
    partial: bool = False,
) -> tuple[list[SlicedBlock], str, list[str]]:
    """Blocks `first_block .. num_tokens // block_size - 1` of one sequence's cache.

    `num_tokens` is how many leading tokens of the cache the caller vouches for. With
    `partial` (token-granular layouts only) the unfilled last block comes too, holding
    the `num_tokens % block_size` tokens past the last whole block.
    Returns (blocks, dtype name, names of arrays stored as uint16 bit patterns of bfloat16).
    """
    if len(prompt_cache) != layout.num_layers:
        raise UnsupportedCache("cache layer count differs from the model's")
    if partial and not layout.token_granular:
        raise UnsupportedCache("partial blocks need every layer to hold every token")
    num_blocks = num_tokens // block_size
    end = num_tokens if partial else num_blocks * block_size
    blocks = [
        SlicedBlock(i, {}, True, False, min(block_size, end - i * block_size))
        for i in range(first_block, -(-end // block_size))
    ]
    if not blocks:
        return [], "", []
    start = first_block * block_size
    dtype, bf16 = "", []
    state_ok = processed_tokens(prompt_cache) in (None, end) and num_tokens == end
    # Every array's slice is evaluated in one mx.eval before any is read on the host:
    # reading them one by one cost a device round trip each (two per layer; on a GPU
    # ~100 ms per stored 8B-shape sequence, every other stream stalled meanwhile).
    slices: list[tuple[str, bool, int, str, mx.array | None]] = []
    states: list[tuple[str, bool, mx.array]] = []
    for li, (c, spec) in enumerate(zip(prompt_cache, layout.layers, strict=True)):
        if spec.kind == ARRAYS:
            if state_ok:
                states += _state_arrays(li, c)
                blocks[-1].has_state = True
            continue
        if spec.kind == QUANTIZED:
            parts = {"k": list(c.keys), "v": list(c.values)}
            span = 0  # quantized caches hold every token from position 0
        elif spec.kind == ROTATING:
            k, v = rotating_in_order(c)
            span = int(c.offset) - k.shape[2]  # position of the first token still held
            parts = {"k": [k], "v": [v]}
        else:
            parts = {"k": [c.keys], "v": [c.values]}
            span = 0
        dtype = dtype or str(parts["k"][0].dtype if spec.kind != QUANTIZED else parts["k"][1].dtype)
        lo = max(start, -(-span // block_size) * block_size)  # first fully held block start
        for side, arrays in parts.items():
            for pi, a in enumerate(arrays):
                name_base = f"l{li}.{side}{pi if spec.kind == QUANTIZED else ''}"
                is_bf16 = a.dtype == mx.bfloat16
                lazy = _bits(a[..., lo - span : end - span, :], is_bf16) if lo < end else None
                slices.append((name_base, is_bf16, lo, spec.kind, lazy))
    mx.eval([x[-1] for x in slices if x[-1] is not None] + [x[-1] for x in states])
    for name_base, is_bf16, lo, kind, lazy in slices:
        host = np.asarray(lazy) if lazy is not None else None
        for b in blocks:
            b_start = b.block_index * block_size
            if b_start < lo:
                b.has_window = b.has_window and kind != ROTATING
                continue
            rel = b_start - lo
            b.arrays[name_base] = host[..., rel : rel + block_size, :].copy()  # type: ignore[index]
            if is_bf16:
                bf16.append(name_base)
    for name, is_bf16, lazy in states:
        blocks[-1].arrays[name] = np.asarray(lazy).copy()
        if is_bf16:
            bf16.append(name)
    return blocks, dtype.removeprefix("mlx.core."), sorted(set(bf16))


def _state_arrays(li: int, c: Any) -> list[tuple[str, bool, mx.array]]:
    """A recurrent layer's state arrays, unevaluated: (name, is bfloat16, bits)."""
    out = []
    for si, s in enumerate(c.cache):
        if s is not None:
            is_bf16 = s.dtype == mx.bfloat16
            out.append((f"l{li}.s{si}", is_bf16, _bits(s, is_bf16)))
    return out


def rebuild(
    model: Any,
    layout: ModelLayout,
    blocks: list[dict[str, np.ndarray]],
    *,
    block_size: int,
    bf16_names: set[str],
    num_tokens: int | None = None,
) -> list[Any]:
    """Per-layer mlx-lm caches holding the prefix made of `blocks` (block 0 first).

    `num_tokens` below `len(blocks) * block_size` keeps only that many leading tokens
    (token-granular layouts only): the last block may be a partial one, or a whole block
    of which the prompt shares only the start.
    The result is what BatchGenerator.insert(..., caches=[...]) takes for one sequence.
    """
    whole = len(blocks) * block_size
    num_tokens = whole if num_tokens is None else num_tokens
    if not (len(blocks) - 1) * block_size < num_tokens <= whole:
        raise ValueError(f"{num_tokens} tokens do not end in the last of {len(blocks)} blocks")
    if num_tokens < whole and not layout.token_granular:
        raise UnsupportedCache("a cut block needs every layer to hold every token")
    caches = make_prompt_cache(model)
    for li, (c, spec) in enumerate(zip(caches, layout.layers, strict=True)):
        if spec.kind == ARRAYS:
            last = blocks[-1]
            c.cache = [
                _host(last, f"l{li}.s{si}", bf16_names) if f"l{li}.s{si}" in last else None
                for si in range(spec.params["size"])
            ]
        elif spec.kind == QUANTIZED:
            c.keys = tuple(_concat(blocks, f"l{li}.k{i}", bf16_names, num_tokens) for i in range(3))
            c.values = tuple(
                _concat(blocks, f"l{li}.v{i}", bf16_names, num_tokens) for i in range(3)
            )
            c.offset = num_tokens
        elif spec.kind == ROTATING:
            keep = min(num_tokens, spec.params["max_size"])
            first = (num_tokens - keep) // block_size
            k = _concat(blocks[first:], f"l{li}.k", bf16_names)
            v = _concat(blocks[first:], f"l{li}.v", bf16_names)
            restore_rotating(c, k[..., -keep:, :], v[..., -keep:, :], num_tokens, keep)
        else:
            c.keys = _concat(blocks, f"l{li}.k", bf16_names, num_tokens)
            c.values = _concat(blocks, f"l{li}.v", bf16_names, num_tokens)
            c.offset = num_tokens
    mx.eval([c.state for c in caches])
    return caches


def _host(block: dict[str, np.ndarray], name: str, bf16_names: set[str]) -> mx.array:
    a = mx.array(block[name])
    return a.view(mx.bfloat16) if name in bf16_names else a


def _concat(
    blocks: list[dict[str, np.ndarray]],
    name: str,
    bf16_names: set[str],
    num_tokens: int | None = None,
) -> mx.array:
    host = np.concatenate([b[name] for b in blocks], axis=-2)[..., :num_tokens, :]
    a = mx.array(host)
    return a.view(mx.bfloat16) if name in bf16_names else a
