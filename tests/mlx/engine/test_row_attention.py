"""Row attention (engine.row_gemv): a few queries' attention as batched gemvs.

On a CPU (these tests) the numbers must agree with MLX's own attention; which kernels
CUDA runs is measured on the GPU (benchmarks/row_gemv_probe.py).
"""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
import pytest
from mlx_lm.models.cache import BatchKVCache, make_prompt_cache

import omlx.draft.model as draft_model
import omlx.mlx_lm_compat.row_attention as ra
from omlx.draft.random_init import draft_config_for, random_draft
from omlx.draft.serving import DFlashPath
from omlx.mlx_lm_compat import KVCache
from omlx.mlx_lm_compat.row_attention import (
    restore_all_row_attention,
    restore_row_attention,
    row_attention,
    takes_rows,
    use_row_attention,
)
from omlx.mlx_lm_compat.row_gemv import use_row_gemv, uses_row_gemv
from tests.fixtures.tiny_models import build_tiny_in_memory
from tests.mlx.draft.conftest import build_target


@pytest.fixture(autouse=True)
def _unpatched():
    yield
    restore_all_row_attention()  # the patch is process-wide: leave no test with it


def _qkv(b: int, heads: int, kv: int, rows: int, length: int, d: int, seed: int = 0):
    k1, k2, k3 = mx.random.split(mx.random.key(seed), 3)
    return (
        mx.random.normal((b, heads, rows, d), key=k1),
        mx.random.normal((b, kv, length, d), key=k2),
        mx.random.normal((b, kv, length, d), key=k3),
    )


def _masks(b: int, heads: int, rows: int, length: int):
    key = mx.random.key(9)
    return {
        "none": None,
        "causal": "causal",
        "bool per row": mx.random.uniform(shape=(b, 1, rows, length), key=key) > 0.3,
        "additive per head": mx.random.normal((b, heads, rows, length), key=key),
        "bool 2-d": mx.random.uniform(shape=(rows, length), key=key) > 0.2,
        "bool over keys": mx.arange(length) < length - 1,
    }


@pytest.mark.parametrize(
    "shape",
    [(1, 9, 3, 16, 40, 64), (2, 4, 4, 3, 10, 32), (1, 8, 2, 2, 5, 16), (1, 4, 2, 4, 64, 32)],
)
def test_row_attention_computes_what_mlx_attention_does(shape) -> None:
    b, heads, _kv, rows, length, d = shape
    q, k, v = _qkv(*shape)
    for name, mask in _masks(b, heads, rows, length).items():
        want = mx.fast.scaled_dot_product_attention(q, k, v, scale=d**-0.5, mask=mask)
        got = row_attention(q, k, v, d**-0.5, mask)
        assert got.shape == want.shape, name
        assert mx.allclose(got, want, rtol=1e-5, atol=1e-5).item(), name


def test_the_causal_mask_is_aligned_to_the_keys_end() -> None:
    # Query r of R sees keys 0..S-R+r: the last query sees all, the first S-R+1.
    q, k, v = _qkv(1, 2, 2, 4, 9, 8, seed=3)
    got = row_attention(q, k, v, 0.3, "causal")
    for r in range(4):
        seen = 9 - 4 + r + 1
        alone = row_attention(q[:, :, r : r + 1], k[:, :, :seen], v[:, :, :seen], 0.3)
        assert mx.allclose(got[:, :, r : r + 1], alone, rtol=1e-5, atol=1e-5).item()


def test_only_a_few_queries_over_short_keys_take_rows() -> None:
    q1, k, v = _qkv(1, 4, 2, 1, 32, 16)
    q3, _, _ = _qkv(1, 4, 2, 3, 32, 16)
    q4, _, _ = _qkv(1, 4, 2, 4, 32, 16)
    q16, _, _ = _qkv(1, 4, 2, 16, 32, 16)
    q17, _, _ = _qkv(1, 4, 2, 17, 32, 16)
    assert not takes_rows(q1, k, v)  # one query: MLX's fused vector kernel
    assert not takes_rows(q3, k, v, "causal")  # up to three unmasked: that kernel too
    assert takes_rows(q3, k, v, mx.ones((3, 32), dtype=mx.bool_))  # masked: the fallback
    assert takes_rows(q4, k, v, "causal")
    assert takes_rows(q16, k, v)
    assert not takes_rows(q17, k, v)  # a prefill
    assert not takes_rows(q16, k, v, max_kv_bytes=k.nbytes)  # a long context


def test_half_precision_causal_attention_stays_mlx_s(monkeypatch) -> None:
    calls = _count_row_calls(monkeypatch)
    model = build_tiny_in_memory("llama", seed=4)
    model.set_dtype(mx.float16)
    use_row_attention(model)
    cache = make_prompt_cache(model)
    model(mx.array([[3, 17, 42, 99, 5, 128]]), cache=cache)  # "causal": cuDNN on CUDA
    assert calls == []
    from omlx.draft.capture import VerifyKVCache

    verify = [VerifyKVCache() for _ in model.layers]  # array masks: the composed fallback
    model(mx.array([[3, 17, 42, 99, 5, 128]]), cache=verify)
    assert calls == [6] * len(model.layers)


def _count_row_calls(monkeypatch, where=ra) -> list[int]:
    calls: list[int] = []
    original = ra.row_attention

    def counting(queries, *args):
        calls.append(queries.shape[2])
        return original(queries, *args)

    monkeypatch.setattr(where, "row_attention", counting)
    return calls


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_a_patched_model_computes_what_the_stock_one_does(arch: str, monkeypatch) -> None:
    calls = _count_row_calls(monkeypatch)
    model = build_tiny_in_memory(arch, seed=4)
    prompt = mx.array([[3, 17, 42, 99, 5, 128, 7, 64, 11, 2, 90, 31]])
    want = []
    for patched in (False, True):
        if patched:
            assert use_row_attention(model) > 0
            assert use_row_attention(model) == 0  # idempotent
        cache = make_prompt_cache(model)
        logits = [model(prompt[:, :8], cache=cache)]  # 8 rows from empty: causal
        logits.append(model(prompt[:, 8:], cache=cache))  # 4 rows over 8 cached keys
        logits.append(model(prompt[:, :1], cache=cache))  # one row: MLX's own
        if not patched:
            want = logits
            continue
        for got, ref in zip(logits, want, strict=True):
            assert mx.allclose(got, ref, rtol=1e-4, atol=1e-4).item()
    layers = len(model.layers)
    assert calls == [8] * layers + [4] * layers  # the one-row pass stayed MLX's
    restore_row_attention(model)
    model(prompt[:, :4])
    assert len(calls) == 2 * layers


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_a_left_padded_batch_row_computes_what_the_stock_model_does(arch: str) -> None:
    """A batch prefill whose second row is left-padded: the padding's queries see no key
    at all. MLX fills such a row with its dtype's lowest value, not -inf, so it stays
    finite; with -inf it is NaN, the next layer's keys and values at the padding are NaN,
    and 0 x NaN in the values product spoils the row's real tokens too."""
    model = build_tiny_in_memory(arch, seed=4)
    rows = mx.array([[3, 17, 42, 99, 5, 8], [0, 0, 250, 4, 9, 33]])

    def run():
        cache = [BatchKVCache(left_padding=[0, 2]) for _ in model.layers]
        first = model(rows[:, :-1], cache=cache)  # 5 rows under a padding mask
        return mx.concatenate([first, model(rows[:, -1:], cache=cache)], axis=1)

    want = run()
    assert use_row_attention(model) > 0
    got = run()
    assert not mx.isnan(got).any().item()
    assert mx.allclose(got[0], want[0], rtol=1e-4, atol=1e-4).item()
    assert mx.allclose(got[1, 2:], want[1, 2:], rtol=1e-4, atol=1e-4).item()


def test_the_draft_attends_by_rows_when_chosen_and_computes_the_same(monkeypatch) -> None:
    calls = _count_row_calls(monkeypatch, where=draft_model)
    target = build_target("qwen3")
    plain = random_draft(draft_config_for(target), seed=2)
    rows = random_draft(draft_config_for(target), seed=2)
    use_row_gemv(rows)
    assert all(layer.self_attn.attends_by_rows for layer in rows.layers)
    assert not any(layer.self_attn.attends_by_rows for layer in plain.layers)
    block = rows.config.block_size
    x = mx.random.normal((1, block, rows.config.hidden_size), key=mx.random.key(1))
    context = mx.random.normal((1, 6, rows.config.hidden_size), key=mx.random.key(2))
    for layer_plain, layer_rows in zip(plain.layers, rows.layers, strict=True):
        a = layer_plain.self_attn(x, context, KVCache())
        b = layer_rows.self_attn(x, context, KVCache())
        assert mx.allclose(a, b, rtol=1e-4, atol=1e-4).item()
    assert calls and set(calls) == {block}


def test_a_quantized_target_is_chosen_for_its_attention_and_its_draft_follows() -> None:
    target = build_target("qwen3")
    nn.quantize(target, group_size=32, bits=4)
    assert use_row_gemv(target, all_or_none=True) == 0  # no float linear to swap
    assert uses_row_gemv(target)  # but chosen: its attention takes rows
    path = DFlashPath("random")
    assert path._generator_for(target) is not None and path._draft is not None
    assert uses_row_gemv(path._draft)
    assert all(layer.self_attn.attends_by_rows for layer in path._draft.layers)


def test_row_and_folded_patches_stack_and_each_is_found_under_the_other() -> None:
    from mlx_lm.models import llama

    from omlx.mlx_lm_compat.decode_attention import (
        restore_decode_attention,
        use_folded_decode_attention,
    )

    stock = llama.scaled_dot_product_attention
    model = build_tiny_in_memory("llama", seed=4)
    try:
        assert use_folded_decode_attention(model) == 1
        assert use_row_attention(model) == 1  # wraps the folded one
        assert use_folded_decode_attention(model) == 0  # found below the row wrapper
        assert use_row_attention(model) == 0
        restore_row_attention(model)
        assert llama.scaled_dot_product_attention is not stock  # folded still on
        restore_decode_attention(model)
        assert llama.scaled_dot_product_attention is stock
    finally:
        restore_decode_attention(model)
        restore_all_row_attention()
