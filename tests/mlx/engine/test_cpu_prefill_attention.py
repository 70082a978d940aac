"""Prefill attention on a CPU with numpy's softmax: MLX's attention to float32 rounding,
for every mask mlx-lm passes, installed by the engine on a CPU only."""

from __future__ import annotations

import sys

import mlx.core as mx
import pytest

from omlx.engine.loading import LoadedModel
from omlx.engine.mlx_backend import MLXBackend
from omlx.mlx_lm_compat import cpu_prefill_attention as cpa
from omlx.mlx_lm_compat.cpu_prefill_attention import (
    cpu_prefill_attention,
    restore_cpu_prefill_attention,
    takes_cpu_prefill,
    use_cpu_prefill_attention,
)
from omlx.settings import EngineSettings
from tests.mlx.draft.conftest import build_target


def _qkv(b, h, kv, n, s, dtype=mx.float32, seed=0):
    mx.random.seed(seed)
    q = mx.random.normal((b, h, n, 64)).astype(dtype)
    k = mx.random.normal((b, kv, s, 64)).astype(dtype)
    return q, k, mx.random.normal((b, kv, s, 64)).astype(dtype)


def _masks(b, n, s, dtype=mx.float32):
    mx.random.seed(1)
    keep = mx.random.uniform(shape=(b, 1, n, s)) > 0.3
    return {
        "none": None,
        "causal": "causal",
        "bool": keep,
        "additive": mx.where(keep, 0.0, -1e9).astype(dtype),  # MLX: the inputs' dtype
        "2d": mx.arange(s)[None] <= mx.arange(s - n, s)[:, None],
        "per-head": mx.random.uniform(shape=(b, 6, n, s)) > 0.5,
    }


@pytest.mark.parametrize("name", ["none", "causal", "bool", "additive", "2d", "per-head"])
@pytest.mark.parametrize("dtype", [mx.float32, mx.bfloat16])
def test_equals_mlx_attention(name, dtype):
    b, h, kv, n, s = 2, 6, 2, 80, 150  # GQA 3, the queries the last n of s positions
    q, k, v = _qkv(b, h, kv, n, s, dtype)
    mask = _masks(b, n, s, dtype)[name]
    ref = mx.fast.scaled_dot_product_attention(q, k, v, scale=0.125, mask=mask)
    got = cpu_prefill_attention(q, k, v, 0.125, mask)
    assert got.dtype == dtype and got.shape == ref.shape
    tol = 1e-5 if dtype == mx.float32 else 2e-2
    assert mx.abs(got.astype(mx.float32) - ref.astype(mx.float32)).max().item() < tol


def test_blocks_of_queries_give_each_row_its_own_keys(monkeypatch):
    """Under BLOCK_SCORES the queries go in blocks, each with its slice of the causal
    mask: the same result as one block, to the BLAS's rounding (its edge tiles round
    differently), and different if the mask slices were off by a row."""
    q, k, v = _qkv(1, 6, 2, 100, 300)
    whole = cpu_prefill_attention(q, k, v, 0.125, "causal")
    for rows in (7, 1):
        monkeypatch.setattr(cpa, "BLOCK_SCORES", 6 * 300 * rows)
        blocks = cpu_prefill_attention(q, k, v, 0.125, "causal")
        assert mx.abs(blocks - whole).max().item() < 1e-6
    shifted = cpu_prefill_attention(q, k[:, :, 1:], v[:, :, 1:], 0.125, "causal")
    assert mx.abs(shifted - whole).max().item() > 1e-3


def test_a_fully_masked_row_is_mlx_s_uniform_row_not_nan():
    """A left-padded prompt's padding rows see no key: MLX masks with float32's lowest
    value, so the row averages the values; -inf would make it NaN."""
    q, k, v = _qkv(1, 4, 4, 64, 64)
    keep = mx.ones((1, 1, 64, 64), dtype=mx.bool_)
    keep[..., :5, :] = False
    got = cpu_prefill_attention(q, k, v, 0.125, keep)
    ref = mx.fast.scaled_dot_product_attention(q, k, v, scale=0.125, mask=keep)
    assert not mx.isnan(got).any().item()
    assert mx.allclose(got, ref, atol=1e-5).item()


def test_takes_prefill_chunks_only():
    q, k, v = _qkv(1, 6, 2, cpa.MIN_QUERIES, 100)
    assert takes_cpu_prefill(q, k, v, "causal")
    assert takes_cpu_prefill(q, k, v, None)
    assert takes_cpu_prefill(q, k, v, mx.ones((1, 1, cpa.MIN_QUERIES, 100), dtype=mx.bool_))
    short = q[:, :, : cpa.MIN_QUERIES - 1]
    assert not takes_cpu_prefill(short, k, v, "causal")  # a decode step or a DFlash verify
    assert not takes_cpu_prefill(q, k, v, "sliding")  # a mask kind it does not know


def test_a_model_prefills_to_the_same_logits_through_it(monkeypatch):
    model = build_target("llama", num_hidden_layers=2)
    prompt = mx.array([[(7 * i) % 250 + 3 for i in range(200)]])
    ref = model(prompt)
    calls: list[int] = []
    real = cpa.cpu_prefill_attention
    monkeypatch.setattr(cpa, "cpu_prefill_attention", lambda *a: calls.append(1) or real(*a))
    # An engine built earlier in this process may have patched llama's module already
    # (the patch is per module and lasts the process): start from MLX's attention.
    restore_cpu_prefill_attention(model)
    try:
        assert use_cpu_prefill_attention(model) == 1
        assert use_cpu_prefill_attention(model) == 0  # idempotent
        got = model(prompt)
    finally:
        restore_cpu_prefill_attention(model)
    assert len(calls) == 2  # both layers' attention went through it
    assert mx.abs(got - ref).max().item() < 1e-4
    assert mx.array_equal(got.argmax(-1), ref.argmax(-1)).item()


def test_the_engine_installs_it_on_a_cpu_only():
    model = build_target("qwen3")
    module = sys.modules[type(model.model.layers[0].self_attn).__module__]
    restore_cpu_prefill_attention(model)  # as above: an earlier engine may have patched it
    original = module.scaled_dot_product_attention
    loaded = LoadedModel(model, None, None, frozenset(), 0)  # type: ignore[arg-type]
    try:
        MLXBackend(EngineSettings(cpu_prefill_attention="off")).new_generator(loaded).close()
        assert module.scaled_dot_product_attention is original
        MLXBackend(EngineSettings()).new_generator(loaded).close()
        on_cpu = mx.default_device().type == mx.DeviceType.cpu
        assert (module.scaled_dot_product_attention is not original) == on_cpu
    finally:
        restore_cpu_prefill_attention(model)
    assert module.scaled_dot_product_attention is original
