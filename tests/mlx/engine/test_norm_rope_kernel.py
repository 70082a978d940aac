"""The fused query/key norm and rotation kernel: its CUDA source on host threads, which
modules it takes, the attention module's wiring around it (on any device, with MLX's
own norm and rope standing in for the kernel), and on a CUDA GPU the same tokens."""

from __future__ import annotations

import mlx.core as mx
import pytest
from mlx_lm.models.cache import BatchKVCache, make_prompt_cache

from omlx.mlx_lm_compat import norm_rope_kernel
from omlx.mlx_lm_compat.norm_rope_kernel import fits, restore_norm_rope, use_norm_rope
from tests.fixtures.norm_rope_host_sim import NormRopeCase, compiler, run
from tests.mlx.draft.conftest import build_target

cuda = pytest.mark.skipif(not mx.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.mark.skipif(compiler() is None, reason="needs g++ (C++20) to run the kernel's source")
def test_the_kernel_source_norms_and_rotates_on_host_threads(tmp_path):
    """A batched decode step (an offset a row, one of them past left padding), a prefill
    chunk from a lone cache's int offset, the three head sizes, a linear RoPE scale and
    as many query as key heads."""
    cases = [
        NormRopeCase(rows=3, tokens=1, heads=8, kv_heads=2, head_dim=128, per_row_offset=True),
        NormRopeCase(rows=1, tokens=5, heads=4, kv_heads=4, head_dim=64, per_row_offset=False),
        NormRopeCase(2, 2, 2, 1, 256, True, base=10_000.0, scale=0.25),
    ]
    errors = run(
        norm_rope_kernel._SOURCE, norm_rope_kernel._HEADER, cases, norm_rope_kernel.WARPS, tmp_path
    )
    assert len(errors) == len(cases)
    assert max(errors) < 2e-5, errors


def test_it_takes_qwen3_attention_only():
    qwen3 = build_target("qwen3", head_dim=64)
    assert all(fits(layer.self_attn) for layer in qwen3.layers)
    llama = build_target("llama")  # no per-head norms
    assert not any(fits(layer.self_attn) for layer in llama.layers)
    odd = build_target("qwen3", head_dim=32)  # pairs (d, d + 16) would cross lanes
    assert not any(fits(layer.self_attn) for layer in odd.layers)


def _mlx_norm_rope(queries, keys, q_weight, k_weight, *, heads, kv_heads, eps, base, scale, offset):
    """MLX's own norm and rope in the kernel's place: what the module computed before."""
    b, n, _ = queries.shape

    def one(x, weight, count):
        x = mx.fast.rms_norm(x.reshape(b, n, count, -1), weight, eps).transpose(0, 2, 1, 3)
        d = x.shape[-1]
        return mx.fast.rope(x, d, traditional=False, base=base, scale=scale, offset=offset)

    return one(queries, q_weight, heads), one(keys, k_weight, kv_heads)


def test_the_swapped_module_computes_what_qwen3_did(monkeypatch):
    """With MLX's norm and rope standing in for the kernel, the swapped attention gives
    the model's own logits: the projections, the cache update, the attention call and
    the output layout around the kernel are right, for a lone cache and a batch cache."""
    model = build_target("qwen3", head_dim=64)
    prompt = mx.array([[3, 17, 42, 99, 5, 8]])
    rows = mx.array([[3, 17, 42, 99, 5, 8], [0, 0, 250, 4, 9, 33]])

    def run(ids, cache):
        first = model(ids[:, :-1], cache=cache)
        return mx.concatenate([first, model(ids[:, -1:], cache=cache)], axis=1)

    plain = run(prompt, make_prompt_cache(model))
    plain_batch = run(rows, [BatchKVCache(left_padding=[0, 2]) for _ in model.layers])
    monkeypatch.setattr(norm_rope_kernel, "norm_rope", _mlx_norm_rope)
    assert use_norm_rope(model) == len(model.layers)
    assert use_norm_rope(model) == 0  # already swapped
    try:
        fused = run(prompt, make_prompt_cache(model))
        fused_batch = run(rows, [BatchKVCache(left_padding=[0, 2]) for _ in model.layers])
    finally:
        restore_norm_rope(model)
    assert type(model.layers[0].self_attn).__name__ == "Attention"
    assert mx.allclose(fused, plain, atol=1e-5).item()
    assert mx.allclose(fused_batch[1, 2:], plain_batch[1, 2:], atol=1e-5).item()
    assert mx.allclose(fused_batch[0], plain_batch[0], atol=1e-5).item()


@cuda
@pytest.mark.parametrize("dtype", [mx.float32, mx.bfloat16])
def test_the_kernel_matches_mlx_on_the_gpu(dtype):
    b, n, heads, kv, d = 3, 2, 8, 2, 128
    x = mx.random.normal((b, n, (heads + 2 * kv) * d)).astype(dtype)
    q, k = x[..., : heads * d], x[..., heads * d : (heads + kv) * d]
    qw, kw = (mx.random.uniform(0.5, 1.5, (d,)).astype(dtype) for _ in range(2))
    args = dict(heads=heads, kv_heads=kv, eps=1e-6, base=1e6, scale=1.0)
    offsets = mx.array([5, -2, 300], dtype=mx.int32)
    got = norm_rope_kernel.norm_rope(q, k, qw, kw, offset=offsets, **args)
    want = _mlx_norm_rope(q, k, qw, kw, offset=offsets, **args)
    tol = 1e-4 if dtype == mx.float32 else 3e-2
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape
        assert mx.allclose(g.astype(mx.float32), w.astype(mx.float32), atol=tol).item()


@cuda
def test_batched_decode_gives_the_same_tokens_with_the_kernel():
    from tests.mlx.engine.test_decode_attention import _generate

    model = build_target("qwen3", head_dim=64)
    prompts = [[3, 17, 42, 99, 5], [8, 1, 2], [250, 4, 9, 33, 70, 71, 12], [6]]
    plain = _generate(model, prompts)
    use_norm_rope(model)
    try:
        assert _generate(model, prompts) == plain
    finally:
        restore_norm_rope(model)


def test_a_kernel_that_fails_at_load_leaves_the_model_its_own_norms(monkeypatch):
    """engine.fused_norm_rope on a CUDA that cannot compile or run the kernel: the
    warm-up at load shows it, and the model keeps mlx-lm's attention, also in a
    generator made anew after a failed step."""
    from omlx.engine import mlx_backend
    from omlx.engine.loading import LoadedModel
    from omlx.engine.mlx_backend import MLXBackend
    from omlx.settings import EngineSettings

    def broken(model):
        raise RuntimeError("nvrtc: error")

    monkeypatch.setattr(mlx_backend, "on_cuda", lambda: True)
    monkeypatch.setattr(mlx_backend, "warm_kernel_attention", broken)
    model = build_target("qwen3", head_dim=64)
    loaded = LoadedModel(model, None, None, frozenset(), 0)  # type: ignore[arg-type]
    backend = MLXBackend(EngineSettings(fused_norm_rope="on", decode_attention="mlx"))
    backend.new_generator(loaded).close()
    assert type(model.layers[0].self_attn).__name__ == "Attention"
    assert model._omlx_norm_rope_failed
    backend.new_generator(loaded).close()
    assert type(model.layers[0].self_attn).__name__ == "Attention"


def test_the_backend_swaps_the_modules_when_it_warms(monkeypatch):
    from omlx.engine import mlx_backend
    from omlx.engine.loading import LoadedModel
    from omlx.engine.mlx_backend import MLXBackend
    from omlx.settings import EngineSettings

    monkeypatch.setattr(mlx_backend, "on_cuda", lambda: True)
    monkeypatch.setattr(mlx_backend, "warm_kernel_attention", lambda model: True)
    model = build_target("qwen3", head_dim=64)
    loaded = LoadedModel(model, None, None, frozenset(), 0)  # type: ignore[arg-type]
    MLXBackend(EngineSettings(fused_norm_rope="on", decode_attention="mlx")).new_generator(
        loaded
    ).close()
    try:
        assert type(model.layers[0].self_attn).__name__ == "NormRopeAttention"
    finally:
        restore_norm_rope(model)
    off = build_target("qwen3", head_dim=64)
    loaded = LoadedModel(off, None, None, frozenset(), 0)  # type: ignore[arg-type]
    MLXBackend(EngineSettings(decode_attention="mlx")).new_generator(loaded).close()
    assert type(off.layers[0].self_attn).__name__ == "Attention"
