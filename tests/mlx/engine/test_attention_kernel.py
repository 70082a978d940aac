"""The custom CUDA attention kernel: which calls it takes (everywhere), and on a CUDA GPU
the same attention as MLX's and the same tokens."""

from __future__ import annotations

import subprocess

import mlx.core as mx
import pytest
from mlx.utils import tree_map

from omlx.engine.mlx_backend import MLXBackend
from omlx.mlx_lm_compat import attention_kernel, attention_kernel_source
from omlx.mlx_lm_compat.attention_kernel import (
    kernel_attention,
    queries_per_block,
    restore_kernel_attention,
    takes_batched_decode,
    takes_decode_or_verify,
    takes_kernel,
    use_kernel_attention,
    verifying,
    warm_kernel_attention,
)
from omlx.mlx_lm_compat.cuda_header import CONVERSIONS
from omlx.settings import EngineSettings
from tests.fixtures.cuda_host_sim import (
    Case,
    build_pair_program,
    build_program,
    compiler,
    run_cases,
    run_program,
)
from tests.mlx.draft.conftest import build_target

cuda = pytest.mark.skipif(not mx.cuda.is_available(), reason="needs a CUDA GPU")


def _qkv(b=3, heads=8, kv=2, n=1, s=20, d=64, dtype=mx.float32):
    q = mx.zeros((b, heads, n, d), dtype)
    k = mx.zeros((b, kv, s, d), dtype)
    return q, k, mx.zeros((b, kv, s, d), dtype)


def test_takes_masked_decode_and_short_blocks():
    q, k, v = _qkv()
    left = (mx.arange(20)[None] >= mx.array([0, 2, 5])[:, None])[:, None, None, :]
    assert takes_kernel(q, k, v, left)
    assert takes_kernel(q, k, v, left[0])  # broadcast over the rows
    q16, k16, v16 = _qkv(b=1, heads=9, kv=3, n=16, s=40)
    assert takes_kernel(q16, k16, v16, "causal")
    assert takes_kernel(q16, k16, v16, None)  # a draft block attends to everything
    full = mx.ones((1, 9, 16, 40), mx.bool_)
    assert takes_kernel(q16, k16, v16, full)


def test_leaves_the_rest_to_mlx():
    q, k, v = _qkv()
    assert not takes_kernel(q, k, v, None)  # a lone query, no mask: MLX's fused kernel
    assert not takes_kernel(q, k, v, mx.zeros((3, 1, 1, 20)))  # additive mask
    assert not takes_kernel(q, k, v, mx.ones((3, 1, 1, 19), mx.bool_))  # wrong length
    assert not takes_kernel(q, k, v, mx.ones((2, 1, 1, 20), mx.bool_))  # wrong rows
    assert not takes_kernel(*_qkv(n=17), "causal")  # a prefill chunk
    assert not takes_kernel(*_qkv(d=80), "causal")  # not whole warps of elements
    assert not takes_kernel(*_qkv(heads=6, kv=4), "causal")
    q32, k32, v32 = _qkv()
    assert not takes_kernel(q32, k32.astype(mx.bfloat16), v32, "causal")
    assert not takes_kernel(*_qkv(n=4, s=3), "causal")  # more queries than keys


def test_queries_per_block_fits_the_registers(monkeypatch):
    assert queries_per_block(4, 1, 128) == 4  # Qwen3-8B decode: the whole group
    assert queries_per_block(3, 16, 64) == 4  # SmolLM2 verify: 48 vectors in 12 blocks
    assert queries_per_block(8, 1, 256) == 4
    assert queries_per_block(1, 1, 64) == 1
    # Several queries take the same count whatever their number: one compile each.
    assert queries_per_block(3, 2, 64) == queries_per_block(3, 9, 64) == 4
    monkeypatch.setattr(attention_kernel, "MULTI_QUERY_BLOCK", None)  # the register budget
    assert queries_per_block(3, 16, 64) == 16
    assert queries_per_block(2, 5, 96) == 10
    monkeypatch.setattr(attention_kernel, "MULTI_QUERY_BLOCK", 64)  # never past it
    assert queries_per_block(3, 16, 64) == 16


def test_a_verify_of_any_length_shares_one_compiled_variant(monkeypatch):
    """MLX compiles each template once per process (~1.4 s on an H100): the 2-16 queries
    of DFlash verifies (fewer at a request's end) must not each bring one."""
    monkeypatch.setattr(attention_kernel, "_variants", {})
    templates = {
        str(attention_kernel._variant(mx.float32, 9, 3, n, 64, "causal", 0.125))
        for n in range(2, 17)
    }
    assert len(templates) == 1 and len(attention_kernel._variants) == 1
    decode = attention_kernel._variant(mx.float32, 9, 3, 1, 64, mx.array([True]), 0.125)
    assert dict(decode[0])["QLEN"] == 1  # a decode step keeps its compiled-in count


def test_the_engine_setting_installs_it_on_cuda_only():
    import sys

    from omlx.engine.loading import LoadedModel

    model = build_target("llama")
    module = sys.modules[type(model.model.layers[0].self_attn).__module__]
    original = module.scaled_dot_product_attention
    loaded = LoadedModel(model, None, None, frozenset(), 0)  # type: ignore[arg-type]
    try:
        settings = EngineSettings(decode_attention="kernel", cpu_prefill_attention="off")
        MLXBackend(settings).new_generator(loaded).close()
        patched = module.scaled_dot_product_attention is not original
        assert patched == mx.cuda.is_available()
    finally:
        restore_kernel_attention(model)
    assert module.scaled_dot_product_attention is original


def test_a_kernel_that_fails_at_load_leaves_the_model_on_mlx_attention(monkeypatch):
    """A CUDA that cannot compile or run the kernel must not fail every step: the warm-up
    at load is where it shows, and the model goes back to MLX's attention."""
    import sys

    from omlx.engine import mlx_backend
    from omlx.engine.loading import LoadedModel

    def broken(model):
        raise RuntimeError("nvrtc: error")

    monkeypatch.setattr(mlx_backend, "on_cuda", lambda: True)
    monkeypatch.setattr(mlx_backend, "warm_kernel_attention", broken)
    model = build_target("qwen3", head_dim=64)
    module = sys.modules[type(model.model.layers[0].self_attn).__module__]
    original = module.scaled_dot_product_attention
    loaded = LoadedModel(model, None, None, frozenset(), 0)  # type: ignore[arg-type]
    backend = MLXBackend(EngineSettings(decode_attention="kernel", cpu_prefill_attention="off"))
    backend.new_generator(loaded).close()
    assert module.scaled_dot_product_attention is original
    backend.new_generator(loaded).close()  # a generator made anew after a failed step
    assert module.scaled_dot_product_attention is original


@cuda
@pytest.mark.parametrize(
    "b,heads,kv,n,d,mask_kind,dtype",
    [
        (5, 8, 2, 1, 64, "left", mx.float32),
        (5, 32, 8, 1, 128, "left", mx.bfloat16),
        (1, 9, 3, 16, 64, "causal", mx.float32),
        (1, 9, 3, 16, 64, "none", mx.float32),
        (2, 4, 4, 16, 128, "array", mx.float16),
    ],
)
def test_kernel_equals_mlx_attention(b, heads, kv, n, d, mask_kind, dtype):
    s, extra = 45, 6
    mx.random.seed(0)
    q = mx.random.normal((b, n, heads, d)).astype(dtype).transpose(0, 2, 1, 3)
    kbuf = mx.random.normal((b, kv, s + 2 * extra, d)).astype(dtype)
    vbuf = mx.random.normal((b, kv, s + 2 * extra, d)).astype(dtype)
    k, v = kbuf[:, :, extra : extra + s], vbuf[:, :, extra : extra + s]
    if mask_kind == "left":
        left = mx.array([0, 3, 7, 0, 20][:b])
        mask = (mx.arange(s)[None] >= left[:, None])[:, None, None, :]
    elif mask_kind == "array":
        mask = (mx.arange(s - n, s)[:, None] >= mx.arange(s)[None])[None, None]
    else:
        mask = "causal" if mask_kind == "causal" else None
    assert takes_kernel(q, k, v, mask)
    got = kernel_attention(q, k, v, d**-0.5, mask)
    want = mx.fast.scaled_dot_product_attention(q, k, v, scale=d**-0.5, mask=mask)
    assert got.shape == want.shape
    tol = 1e-4 if dtype == mx.float32 else 2e-2
    assert mx.allclose(got.astype(mx.float32), want.astype(mx.float32), atol=tol).item()


@cuda
def test_batched_decode_gives_the_same_tokens_with_the_kernel():
    from tests.mlx.engine.test_decode_attention import _generate

    model = build_target("qwen3", head_dim=64)  # a head size the kernel takes
    prompts = [[3, 17, 42, 99, 5], [8, 1, 2], [250, 4, 9, 33, 70, 71, 12], [6]]
    plain = _generate(model, prompts)
    use_kernel_attention(model)
    try:
        assert _generate(model, prompts) == plain
    finally:
        restore_kernel_attention(model)


def _kernel_source() -> tuple[str, str, str]:
    """What the host harness compiles: the kernel's body, mask lookup and header."""
    return (
        attention_kernel_source.SOURCE_KEY_A_WARP,
        attention_kernel_source.MASK_LOOKUP,
        CONVERSIONS,
    )


def _kernel_layout() -> tuple:
    """How the module lays a call out: queries a block, the template's QLEN, warps."""
    return queries_per_block, attention_kernel.template_queries, attention_kernel.WARPS


def _lanes() -> dict[str, str]:
    return {"lanes_source": attention_kernel_source.SOURCE_KEY_A_LANE}


@pytest.mark.skipif(compiler() is None, reason="needs g++ (C++20) to run the kernel's source")
def test_the_kernel_source_computes_attention_on_host_threads(tmp_path):
    """The CUDA source itself, run on the host, a fiber per CUDA thread
    (tests/fixtures/cuda_host_sim.py): masked decode with GQA, a causal 16-query verify,
    a full draft block, head sizes 64 / 96 / 128, strided queries and keys that start
    inside their buffers."""
    cases = [
        Case(rows=3, kv_heads=1, group=4, queries=1, keys=45, head_dim=128, mask="array"),
        Case(rows=1, kv_heads=2, group=3, queries=16, keys=40, head_dim=64, mask="causal"),
        Case(rows=1, kv_heads=1, group=3, queries=16, keys=37, head_dim=64, mask="none"),
        Case(rows=2, kv_heads=1, group=2, queries=5, keys=23, head_dim=96, mask="causal"),
        # a verify's tail: 6 live vectors of a 16-vector block, the count read at run time
        Case(rows=2, kv_heads=1, group=3, queries=2, keys=19, head_dim=64, mask="array"),
        # the candidate loads (pairs of elements, the next key early): a decode step, a
        # verify, keys off pair boundaries (read element by element), a head size that
        # cannot pair (96)
        Case(2, 1, 4, 1, 45, 128, "array", pairs=True, prefetch=True),
        Case(1, 1, 3, 16, 40, 64, "causal", pairs=True, prefetch=True),
        Case(1, 1, 4, 1, 45, 128, "array", pairs=True, prefetch=True, offset=1),
        Case(1, 1, 2, 5, 23, 96, "causal", prefetch=True),
        # several keys' loads together: 45 and 40 keys leave a warp a partial last batch
        Case(2, 1, 4, 1, 45, 128, "array", key_batch=4),
        Case(1, 1, 3, 16, 40, 64, "causal", pairs=True, key_batch=2),
        # a key a lane: a decode step over two tiles of 32 keys (the second partial), 300
        # keys (a warp takes two tiles: its output rescaled) with a row whose whole first
        # tile is padding (row 5: 35 keys), a causal verify, keys off 16-byte boundaries
        # (read element by element), the tail of a verify
        Case(3, 1, 4, 1, 45, 128, "array", lanes=True),
        Case(6, 1, 2, 1, 300, 64, "array", lanes=True),
        Case(1, 1, 3, 16, 40, 64, "causal", lanes=True),
        Case(1, 1, 4, 1, 45, 128, "array", lanes=True, offset=1),
        Case(2, 1, 3, 2, 19, 64, "array", lanes=True),
        Case(2, 1, 2, 5, 23, 96, "causal", lanes=True),
        # the largest head (256: eight elements a lane), now that lanes is the default
        Case(2, 1, 2, 1, 40, 256, "array", lanes=True),
    ]
    program = build_program(*_kernel_source(), cases, *_kernel_layout(), **_lanes())
    errors = run_cases(program, tmp_path)
    assert len(errors) == len(cases)
    assert max(errors) < 1e-5, errors


@pytest.mark.skipif(compiler() is None, reason="needs g++ (C++20) to run the kernel's source")
def test_a_verify_row_is_bit_for_bit_the_one_query_call_over_its_keys(tmp_path):
    """Whether a DFlash verify with the kernel can match plain decoding with it exactly:
    each row of a causal call of 16 queries against a call of that one query over the
    keys it sees, unmasked (a single sequence's step) and under an all-true mask (a
    batch row with no padding). A key's tile and warp follow from its index alone, a
    masked key adds exactly nothing, and the warps merge in a fixed order, so the number
    of queries a call holds should change no bit; the host run checks the arithmetic's
    order (the GPU's contraction into fused multiply-adds is not modelled)."""
    # 70 keys: three tiles of 32 on three warps, the last one partial
    multi = Case(1, 1, 3, 16, 70, 64, "causal", lanes=True)
    pairs = [
        (multi, Case(1, 1, 3, 1, 70, 64, "none", lanes=True)),
        (multi, Case(1, 1, 3, 1, 70, 64, "array", lanes=True)),
        # a head of 128, a block inside one tile
        (
            Case(1, 1, 4, 16, 40, 128, "causal", lanes=True),
            Case(1, 1, 4, 1, 40, 128, "none", lanes=True),
        ),
    ]
    program = build_pair_program(*_kernel_source(), pairs, *_kernel_layout(), **_lanes())
    lines = run_program(program, tmp_path).split("\n")[: len(pairs)]
    assert [line.split()[0] for line in lines] == ["0"] * len(pairs), lines


@pytest.mark.skipif(compiler() is None, reason="needs g++ (C++20) to run the kernel's source")
def test_the_host_run_is_a_cuda_block_and_says_so_when_lanes_diverge(tmp_path):
    """The harness the two tests above stand on: a warp's shuffles reduce across its
    own 32 lanes, `__syncthreads` holds the whole block, and a shuffle that only some
    lanes reach (undefined on a GPU) stops the run with an error instead of a result."""
    from tests.fixtures.cuda_host_sim import PRELUDE

    program = (
        PRELUDE
        + r"""
float out[64], seen[64];
float shared_sum;
void reduce() {
  float v = threadIdx.x;
  for (int off = 16; off; off >>= 1) v += __shfl_xor_sync(0xffffffff, v, off);
  if (threadIdx.x == 0) shared_sum = v;
  __syncthreads();
  out[threadIdx.x] = v;
  seen[threadIdx.x] = shared_sum;
}
void diverged() {
  float v = threadIdx.x;
  if ((threadIdx.x & 31) < 16) v += __shfl_xor_sync(0xffffffff, v, 1);
  out[threadIdx.x] = v;
}
int main(int argc, char**) {
  run_block(0, 0, 0, 2, [] { reduce(); });
  printf("%g %g %g %g\n", out[0], out[31], out[40], seen[63]);
  if (argc > 1) run_block(0, 0, 0, 2, [] { diverged(); });
  return 0;
}
"""
    )
    assert run_program(program, tmp_path).split() == ["496", "496", "1520", "496"]
    exe = tmp_path / "kernel_sim"
    result = subprocess.run([str(exe), "diverge"], capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "deadlock: 32 threads wait at barriers" in result.stderr


def test_auto_is_the_decode_kernel_on_cuda_only():
    assert EngineSettings().decode_attention == "auto"
    assert EngineSettings().attention_mode(cuda=True) == "decode_kernel"
    assert EngineSettings().attention_mode(cuda=False) == "mlx"
    assert EngineSettings(decode_attention="kernel").attention_mode(cuda=True) == "kernel"
    assert EngineSettings(decode_attention="kernel").attention_mode(cuda=False) == "mlx"
    assert EngineSettings(decode_attention="mlx").attention_mode(cuda=True) == "mlx"
    assert EngineSettings(decode_attention="folded").attention_mode(cuda=True) == "folded"


def test_the_batched_decode_mode_takes_one_masked_query_only():
    q, k, v = _qkv()
    left = (mx.arange(20)[None] >= mx.array([0, 2, 5])[:, None])[:, None, None, :]
    assert takes_batched_decode(q, k, v, left)
    assert not takes_batched_decode(q, k, v, None)
    q16, k16, v16 = _qkv(b=1, heads=9, kv=3, n=16, s=40)
    assert takes_kernel(q16, k16, v16, "causal")
    assert not takes_batched_decode(q16, k16, v16, "causal")  # a verify keeps its path
    assert not takes_batched_decode(q16, k16, v16, mx.ones((1, 1, 16, 40), mx.bool_))
    half = [x.astype(mx.bfloat16) for x in (q16, k16, v16)]
    assert not takes_kernel(*half, "causal")  # cuDNN's fused attention is faster there


def test_warming_runs_a_masked_one_query_step_through_every_layer():
    """What warm_kernel_attention makes the patched attention see: the one-token step of
    two rows, one left-padded, in every layer (not the prefill of two tokens). On a CPU
    the calls are recorded, not computed by the kernel."""
    from omlx.mlx_lm_compat.attention_patch import patch_attention, restore_attention

    model = build_target("qwen3", head_dim=64)  # a head size the kernel takes
    seen = []

    def record(q, k, v, scale, mask):
        seen.append((q.shape, mask.shape))
        return mx.fast.scaled_dot_product_attention(q, k, v, scale=scale, mask=mask)

    patch_attention(model, takes_batched_decode, record, "_test_warm")
    try:
        assert warm_kernel_attention(model)
    finally:
        restore_attention(model, "_test_warm")
    assert len(seen) == len(model.layers)
    assert all(q == (2, 4, 1, 64) and m == (2, 1, 1, 3) for q, m in seen)


def test_warming_leaves_models_with_other_caches_alone():
    assert not warm_kernel_attention(build_target("qwen3_5"))  # linear-attention layers


@pytest.mark.parametrize("mask_kind", ["left", "causal", "none"])
def test_the_call_hands_the_kernel_a_consistent_layout(monkeypatch, mask_kind):
    """The Python side of a call, on any device: a stand-in for the compiled kernel checks
    the template against the arrays, and computes the attention in the [B, L, H, D] layout
    the kernel writes; what kernel_attention returns must then be MLX's attention."""
    import struct

    calls = []

    def fake_kernel(masked, lanes=False):
        def run(inputs, template, grid, threadgroup, output_shapes, output_dtypes):
            t = dict(template)
            q, k, v = inputs[:3]
            b, heads, n, d = q.shape
            assert (len(inputs) == 4) == masked
            assert t["GQA"] * t["KV_HEADS"] == heads and t["KV_HEADS"] == k.shape[1]
            assert t["QLEN"] == (1 if n == 1 else 0) and t["HEAD_DIM"] == d and t["T"] == q.dtype
            assert t["CAUSAL"] == (mask_kind == "causal")
            (scale,) = struct.unpack("<f", struct.pack("<i", t["SCALE_BITS"]))
            assert threadgroup == (t["WARPS"] * 32, 1, 1)
            assert grid == (t["WARPS"] * 32, b * t["KV_HEADS"], -(-t["GQA"] * n // t["QPB"]))
            assert output_shapes == [(b, n, heads, d)] and output_dtypes == [q.dtype]
            mask = inputs[3] if masked else ("causal" if t["CAUSAL"] else None)
            if masked:
                assert inputs[3].ndim == 4
            out = mx.fast.scaled_dot_product_attention(q, k, v, scale=scale, mask=mask)
            calls.append(t)
            return [out.transpose(0, 2, 1, 3)]  # written as [B, L, H, D]

        return run

    monkeypatch.setattr(attention_kernel, "_kernel", fake_kernel)
    monkeypatch.setattr(attention_kernel, "_variants", {})
    n = 1 if mask_kind == "left" else 5
    mx.random.seed(1)
    q = mx.random.normal((3, n, 8, 64)).transpose(0, 2, 1, 3)
    k, v = mx.random.normal((3, 2, 20, 64)), mx.random.normal((3, 2, 20, 64))
    if mask_kind == "left":
        mask = (mx.arange(20)[None] >= mx.array([0, 2, 5])[:, None])[:, None, None, :]
    else:
        mask = "causal" if mask_kind == "causal" else None
    for _ in range(2):  # the second call takes the cached variant
        got = kernel_attention(q, k, v, 0.125, mask)
        want = mx.fast.scaled_dot_product_attention(q, k, v, scale=0.125, mask=mask)
        assert got.shape == want.shape == (3, 8, n, 64)
        assert mx.allclose(got, want, atol=1e-6).item()
    assert len(calls) == 2 and calls[0] == calls[1]


def _standin_kernel(seen: list):
    """A stand-in for the compiled kernel (any device): each call's template and mask go
    to `seen`, and the output is MLX's attention in the [B, L, H, D] layout the kernel
    writes."""
    import struct

    def factory(masked, lanes=False):
        def run(inputs, template, grid, threadgroup, output_shapes, output_dtypes):
            t = dict(template)
            q, k, v = inputs[:3]
            (scale,) = struct.unpack("<f", struct.pack("<i", t["SCALE_BITS"]))
            mask = inputs[3] if masked else ("causal" if t["CAUSAL"] else None)
            seen.append((t, mask))
            out = mx.fast.scaled_dot_product_attention(q, k, v, scale=scale, mask=mask)
            return [out.transpose(0, 2, 1, 3)]

        return run

    return factory


def _standin_dflash(monkeypatch) -> tuple[list, object, object]:
    """The calls `seen` by a stand-in kernel (`_standin_kernel`), a target whose head size
    the kernel takes, and a random draft for it."""
    from omlx.draft.random_init import draft_config_for, random_draft

    seen = []
    monkeypatch.setattr(attention_kernel, "_kernel", _standin_kernel(seen))
    monkeypatch.setattr(attention_kernel, "_variants", {})
    target = build_target("qwen3", head_dim=64)
    return seen, target, random_draft(draft_config_for(target), seed=1)


def test_a_draft_takes_the_kernel_for_its_block_attention(monkeypatch):
    """use_kernel_attention on a DFlash draft: its block attention (no mask while it
    drafts from committed context, a `keep` array while it drafts from a verify not yet
    read back) goes through kernel_attention; the tokens stay plain decoding's (a
    stand-in computes the kernel's output with MLX's attention); restoring takes it back."""
    from omlx.draft.baseline import plain_generate
    from omlx.draft.loop import DFlashGenerator, DFlashParams

    seen, target, draft = _standin_dflash(monkeypatch)
    use_kernel_attention(draft)
    assert all(layer.self_attn.attends_by_kernel for layer in draft.layers)
    prompt, params = [3, 17, 42, 99, 5, 128, 7, 64], DFlashParams(max_tokens=40)
    got = DFlashGenerator.from_models(target, draft).generate(prompt, params).run()
    assert got == plain_generate(target, prompt, params).tokens
    masks = [None if mask is None else mask.shape for _, mask in seen]
    keys = {shape[-1] for shape in masks if shape is not None}
    assert None in masks and keys  # the first draft, then drafts from unread verifies
    assert all(shape[:3] == (1, 1, 1) for shape in masks if shape is not None)
    restore_kernel_attention(draft)
    assert not any(layer.self_attn.attends_by_kernel for layer in draft.layers)
    seen.clear()
    DFlashGenerator.from_models(target, draft).generate(prompt, params).run()
    assert not seen


def test_a_target_whose_verifies_take_the_kernel_keeps_unbucketed_keys(monkeypatch):
    """With the kernel taking a float32 target's verifies, DFlash's host-length cache
    hands it the keys in use and a "causal" mask (no key buckets, no array mask to
    read); the tokens stay plain decoding's. A bfloat16 target keeps the buckets (its
    "causal" calls are cuDNN's, which key buckets keep from rebuilding)."""
    from omlx.draft.baseline import plain_generate
    from omlx.draft.capture import TargetAdapter, VerifyKVCache
    from omlx.draft.loop import DFlashGenerator, DFlashParams
    from omlx.mlx_lm_compat import KVCache

    seen, target, draft = _standin_dflash(monkeypatch)
    prompt, params = [3, 17, 42, 99, 5, 128, 7, 64], DFlashParams(max_tokens=40)
    want = plain_generate(target, prompt, params).tokens
    use_kernel_attention(target)
    try:
        adapter = TargetAdapter(target, draft.config.target_layer_ids)
        assert all(type(c) is KVCache for c in adapter.make_cache())
        # The loops that read each verify back use these caches (the one that queues
        # ahead keeps its own, with lengths on the device).
        generator = DFlashGenerator.from_models(target, draft)
        assert generator.generate(prompt, params).run() == want
        causal = [t["CAUSAL"] for t, _ in seen]
        assert causal and all(causal)  # every verify the kernel took was "causal"
        target.update(tree_map(lambda p: p.astype(mx.bfloat16), target.parameters()))
        assert all(type(c) is VerifyKVCache for c in adapter.make_cache())
    finally:
        restore_kernel_attention(target)


def test_the_batched_decode_mode_takes_verifies_inside_verifying_only():
    """`auto` on CUDA patches batched decode only; inside `verifying()` (a DFlash target
    pass, on this thread) every call the kernel takes goes to it too."""
    import threading

    q16, k16, v16 = _qkv(b=1, heads=9, kv=3, n=16, s=40)
    q1, k1, v1 = _qkv()
    left = (mx.arange(20)[None] >= mx.array([0, 2, 5])[:, None])[:, None, None, :]
    assert not takes_decode_or_verify(q16, k16, v16, "causal")  # a prefill chunk
    assert takes_decode_or_verify(q1, k1, v1, left)
    seen_elsewhere = []
    with verifying():
        assert takes_decode_or_verify(q16, k16, v16, "causal")
        assert takes_decode_or_verify(q1, k1, v1, left)
        assert not takes_decode_or_verify(q1, k1, v1, None)  # MLX's own fused kernel
        other = threading.Thread(
            target=lambda: seen_elsewhere.append(takes_decode_or_verify(q16, k16, v16, "causal"))
        )
        other.start()
        other.join()
    assert seen_elsewhere == [False]  # another engine thread's steps stay outside
    with pytest.raises(RuntimeError), verifying():
        raise RuntimeError
    assert not takes_decode_or_verify(q16, k16, v16, "causal")  # left on an error too


def test_the_batched_decode_mode_takes_a_served_drafts_verifies(monkeypatch):
    """With only batched decode patched (`auto` on CUDA), a DFlash target's passes take
    the kernel (so do the draft's, and the cache is the unbucketed one) while the same
    model called outside DFlash with 16 tokens does not; the tokens stay plain
    decoding's. Restoring takes all of it back."""
    from omlx.draft.baseline import plain_generate
    from omlx.draft.capture import TargetAdapter
    from omlx.draft.loop import DFlashGenerator, DFlashParams
    from omlx.mlx_lm_compat import KVCache
    from omlx.mlx_lm_compat.attention_kernel import kernel_takes_verifies

    seen, target, draft = _standin_dflash(monkeypatch)
    prompt, params = [3, 17, 42, 99, 5, 128, 7, 64], DFlashParams(max_tokens=40)
    want = plain_generate(target, prompt, params).tokens
    assert not kernel_takes_verifies(target)
    use_kernel_attention(target, batched_decode_only=True)
    try:
        assert kernel_takes_verifies(target)
        mx.eval(target(mx.arange(16)[None], cache=[KVCache() for _ in target.layers]))
        assert seen == []  # a 16-token pass outside DFlash: MLX's attention
        adapter = TargetAdapter(target, draft.config.target_layer_ids)
        assert all(type(c) is KVCache for c in adapter.make_cache())
        use_kernel_attention(draft)  # what DFlashPath does for a target that takes them
        assert DFlashGenerator.from_models(target, draft).generate(prompt, params).run() == want
        # The target's verifies: "causal" (the draft's block attention never is).
        assert any(t["CAUSAL"] and t["QLEN"] == 0 for t, _ in seen)
    finally:
        restore_kernel_attention(target)
        restore_kernel_attention(draft)
    assert not kernel_takes_verifies(target)
