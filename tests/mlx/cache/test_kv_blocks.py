"""Slice -> rebuild round trips give back the original cache arrays, per cache kind."""

from __future__ import annotations

import random

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm.models.cache import QuantizedKVCache

from omlx.cache import kv_blocks
from tests.mlx.cache.conftest import build_model, greedy

# Differential against stock mlx-lm: `pytest -m mlx_lm_diff` checks a newer mlx-lm.
pytestmark = pytest.mark.mlx_lm_diff

B = 4


def _prompt(n: int, seed: int = 0) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(1, 128) for _ in range(n)]


def _rebuild(model, layout, blocks, bf16=()):
    return kv_blocks.rebuild(
        model, layout, [b.arrays for b in blocks], block_size=B, bf16_names=set(bf16)
    )


def test_round_trip_equals_original(tiny_model) -> None:
    arch, model = tiny_model
    _, cache, tokens = greedy(model, _prompt(30), 6)  # 36 tokens = 9 full blocks
    layout = kv_blocks.model_layout(model)
    blocks, dtype, bf16 = kv_blocks.slice_blocks(
        cache, layout, num_tokens=len(tokens), block_size=B
    )
    assert [b.block_index for b in blocks] == list(range(9))
    assert dtype == "float32" and bf16 == []
    rebuilt = _rebuild(model, layout, blocks)
    for orig, new, spec in zip(cache, rebuilt, layout.layers, strict=True):
        assert type(orig) is type(new)
        if spec.kind == kv_blocks.ARRAYS:
            assert blocks[-1].has_state
            for a, b in zip(orig.cache, new.cache, strict=True):
                assert np.array_equal(np.asarray(a), np.asarray(b))
            continue
        assert new.offset == 36
        ko, kn = np.asarray(orig.keys)[..., -new.keys.shape[2] :, :], np.asarray(new.keys)
        assert np.array_equal(ko, kn)
        assert np.array_equal(np.asarray(orig.values)[..., -new.keys.shape[2] :, :],
                              np.asarray(new.values))  # fmt: skip
        if spec.kind == kv_blocks.ROTATING:
            assert new.keys.shape[2] == 8  # the window, not the whole prefix
    if arch == "gemma3":  # only blocks inside the 8-token window carry the sliding layer
        assert [b.has_window for b in blocks] == [False] * 7 + [True] * 2


def test_state_snapshot_only_on_a_block_boundary() -> None:
    model = build_model("hybrid")
    _, cache, tokens = greedy(model, _prompt(29), 6)  # 35 tokens: ends mid-block
    layout = kv_blocks.model_layout(model)
    blocks, _, _ = kv_blocks.slice_blocks(cache, layout, num_tokens=len(tokens), block_size=B)
    assert len(blocks) == 8
    assert not any(b.has_state for b in blocks)
    assert not any(k.startswith("l0.s") for b in blocks for k in b.arrays)


def test_quantized_and_bf16_round_trip() -> None:
    class TwoLayers:  # a model stand-in whose make_cache gives quantized layers
        layers = (0, 1)

        def make_cache(self):
            return [QuantizedKVCache(group_size=32, bits=8) for _ in self.layers]

    qmodel = TwoLayers()
    caches = qmodel.make_cache()
    mx.random.seed(1)
    for c in caches:
        c.update_and_fetch(mx.random.normal((1, 2, 12, 64)), mx.random.normal((1, 2, 12, 64)))
    mx.eval([c.state for c in caches])
    layout = kv_blocks.model_layout(qmodel)
    assert layout.cache_types == ["quantized", "quantized"]
    blocks, _, _ = kv_blocks.slice_blocks(caches, layout, num_tokens=12, block_size=B)
    names = sorted(blocks[0].arrays)
    assert names == sorted(f"l{i}.{s}{j}" for i in range(2) for s in "kv" for j in range(3))
    rebuilt = _rebuild(qmodel, layout, blocks)
    for orig, new in zip(caches, rebuilt, strict=True):
        assert new.offset == 12 and (new.group_size, new.bits) == (32, 8)
        for a, b in zip(orig.keys + orig.values, new.keys + new.values, strict=True):
            assert np.array_equal(np.asarray(a)[..., :12, :], np.asarray(b))

    model = build_model("llama")
    # bfloat16 travels as uint16 bit patterns and comes back bit-identical.
    _, cache, _tokens = greedy(model, _prompt(10), 2)
    for c in cache:
        c.keys, c.values = c.keys.astype(mx.bfloat16), c.values.astype(mx.bfloat16)
    layout = kv_blocks.model_layout(model)
    blocks, dtype, bf16 = kv_blocks.slice_blocks(cache, layout, num_tokens=12, block_size=B)
    assert dtype == "bfloat16" and bf16 == ["l0.k", "l0.v", "l1.k", "l1.v"]
    new = _rebuild(model, layout, blocks, bf16)
    for a, b in zip(cache, new, strict=True):
        assert b.keys.dtype == mx.bfloat16
        assert mx.array_equal(a.keys[..., :12, :], b.keys).item()


def test_unsupported_layout_is_reported() -> None:
    from mlx_lm.models.cache import RotatingKVCache

    with pytest.raises(kv_blocks.UnsupportedCache):
        kv_blocks.layer_spec(RotatingKVCache(max_size=16, keep=4))


def test_partial_block_and_cut_rebuild() -> None:
    """The unfilled last block slices on its own; a rebuild can stop inside the last block."""
    model = build_model("llama")
    _, cache, tokens = greedy(model, _prompt(29), 6)  # 35 tokens: 8 blocks and 3 over
    layout = kv_blocks.model_layout(model)
    assert layout.token_granular
    blocks, _, _ = kv_blocks.slice_blocks(
        cache, layout, num_tokens=len(tokens), block_size=B, first_block=8, partial=True
    )
    assert [(b.block_index, b.num_tokens) for b in blocks] == [(8, 3)]
    assert blocks[0].arrays["l0.k"].shape[-2] == 3
    whole, _, _ = kv_blocks.slice_blocks(cache, layout, num_tokens=len(tokens), block_size=B)
    for num_tokens, parts in ((35, whole + blocks), (30, whole)):
        rebuilt = kv_blocks.rebuild(
            model,
            layout,
            [b.arrays for b in parts],
            block_size=B,
            bf16_names=set(),
            num_tokens=num_tokens,
        )
        for orig, new in zip(cache, rebuilt, strict=True):
            assert new.offset == num_tokens and new.keys.shape[2] == num_tokens
            assert np.array_equal(np.asarray(orig.keys)[..., :num_tokens, :], np.asarray(new.keys))
    with pytest.raises(ValueError):  # 28 tokens end in block 7, not in the last given
        kv_blocks.rebuild(
            model, layout, [b.arrays for b in whole], block_size=B, bf16_names=set(), num_tokens=28
        )


@pytest.mark.parametrize("arch", ["gemma3", "hybrid"])
def test_partial_blocks_refused_where_tokens_are_not_all_held(arch: str) -> None:
    model = build_model(arch)
    _, cache, _tokens = greedy(model, _prompt(29), 6)
    layout = kv_blocks.model_layout(model)
    assert not layout.token_granular
    with pytest.raises(kv_blocks.UnsupportedCache):
        kv_blocks.slice_blocks(cache, layout, num_tokens=35, block_size=B, partial=True)
