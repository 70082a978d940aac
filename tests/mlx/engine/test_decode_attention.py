"""Folded batched-decode attention: the same attention as MLX's, and the same tokens."""

from __future__ import annotations

import mlx.core as mx
import pytest

from omlx.mlx_lm_compat import decode_attention
from omlx.mlx_lm_compat.batch_join import FusedJoinBatchGenerator
from omlx.mlx_lm_compat.decode_attention import (
    folded_attention,
    restore_decode_attention,
    use_folded_decode_attention,
)
from tests.mlx.draft.conftest import build_target


@pytest.mark.parametrize("heads,kv_heads", [(4, 4), (4, 2), (8, 2)])
@pytest.mark.parametrize("kind", ["bool", "additive", "per_head"])
def test_folded_equals_mlx_attention(heads, kv_heads, kind):
    b, s, d = 5, 37, 16
    mx.random.seed(0)
    q = mx.random.normal((b, heads, 1, d))
    k = mx.random.normal((b, kv_heads, s, d))
    v = mx.random.normal((b, kv_heads, s, d))
    left = mx.array([0, 3, 7, 0, 20])
    keep = (mx.arange(s)[None] >= left[:, None])[:, None, None, :]
    if kind == "bool":
        mask = keep
    elif kind == "additive":
        mask = mx.where(keep, 0.0, -1e9)
    else:
        mask = mx.broadcast_to(keep, (b, heads, 1, s)) & (
            mx.random.uniform(shape=(b, heads, 1, s)) > 0.2
        )
        mask = mask | (mx.arange(s) == s - 1)  # every head attends somewhere
    got = folded_attention(q, k, v, 0.25, mask)
    want = mx.fast.scaled_dot_product_attention(q, k, v, scale=0.25, mask=mask)
    assert got.shape == want.shape
    assert mx.allclose(got, want, atol=1e-5).item()


def _generate(model, prompts, steps=12):
    gen = FusedJoinBatchGenerator(model, stream=mx.new_stream(mx.default_device()))
    try:
        uids = gen.insert(prompts, max_tokens=[steps] * len(prompts))
        out = {u: [] for u in uids}
        while any(len(t) < steps for t in out.values()):
            for r in gen.next_generated():
                out[r.uid].append(r.token)
        return [out[u] for u in uids]
    finally:
        gen.close()


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_batched_decode_gives_the_same_tokens_folded(arch, monkeypatch):
    model = build_target(arch)
    prompts = [[3, 17, 42, 99, 5], [8, 1, 2], [250, 4, 9, 33, 70, 71, 12], [6]]  # ragged
    plain = _generate(model, prompts)
    calls = []
    real = decode_attention.folded_attention
    monkeypatch.setattr(
        decode_attention, "folded_attention", lambda *a: calls.append(1) or real(*a)
    )
    assert use_folded_decode_attention(model) == 1
    assert use_folded_decode_attention(model) == 0  # idempotent
    try:
        folded = _generate(model, prompts)
    finally:
        restore_decode_attention(model)
    assert folded == plain
    assert calls  # the batched one-query steps went through it
    again = _generate(model, prompts)
    assert again == plain


def test_the_engine_setting_installs_it():
    import sys

    import msgspec

    from omlx.engine.loading import LoadedModel
    from omlx.engine.mlx_backend import MLXBackend
    from omlx.settings import EngineSettings

    model = build_target("llama")
    module = sys.modules[type(model.model.layers[0].self_attn).__module__]
    original = module.scaled_dot_product_attention
    loaded = LoadedModel(model, None, None, frozenset(), 0)  # type: ignore[arg-type]
    try:
        # the CPU's prefill attention (its own test) off: this is about decode's
        MLXBackend(EngineSettings(cpu_prefill_attention="off")).new_generator(loaded).close()
        assert module.scaled_dot_product_attention is original
        folded = EngineSettings(decode_attention="folded", cpu_prefill_attention="off")
        MLXBackend(folded).new_generator(loaded).close()
        assert module.scaled_dot_product_attention is not original
    finally:
        restore_decode_attention(model)
    assert module.scaled_dot_product_attention is original
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert({"decode_attention": "fast"}, EngineSettings)
