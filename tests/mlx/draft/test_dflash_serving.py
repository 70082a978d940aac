"""DFlash behind the engine's alternative-path seam: same tokens, reported path."""

from __future__ import annotations

import asyncio

import pytest
from mlx_lm import load

from omlx.draft.random_init import draft_config_for, random_draft, save_draft
from omlx.draft.serving import DFlashPath
from omlx.engine.api import SamplingParams
from omlx.pool.pool import LocalModelPool
from omlx.settings import Settings
from tests.mlx.engine.engine_helpers import collect, request

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module", params=["tiny_qwen3_dir", "tiny_hybrid_dir"])
def model_and_draft(request, tmp_path_factory):
    model_dir = request.getfixturevalue(request.param)
    target, _ = load(str(model_dir))
    draft_dir = tmp_path_factory.mktemp("draft")
    save_draft(random_draft(draft_config_for(target), seed=5), draft_dir)
    return model_dir, draft_dir


def _run(model_dir, alt_paths, *requests):
    async def main():
        pool = LocalModelPool(Settings(), models={"tiny": model_dir}, alt_paths=alt_paths)
        try:
            return await asyncio.gather(*(collect(pool, r) for r in requests))
        finally:
            await pool.close(grace_s=0)

    return asyncio.run(main())


@pytest.mark.parametrize("warm_up", [None, True], ids=["as-on-this-device", "warmed-at-load"])
def test_dflash_served_request_equals_batched(model_and_draft, warm_up):
    """Also after the load's warm-up generations (a GPU's default), which leave no stats
    and no state behind."""
    model_dir, draft_dir = model_and_draft
    path = DFlashPath(draft_dir, warm_up=warm_up)
    [plain] = _run(model_dir, None, request("tell me a story", max_tokens=24))
    [fast] = _run(model_dir, {"tiny": path}, request("tell me a story", max_tokens=24))
    assert fast.done.served_by == "dflash"
    assert plain.done.served_by == "batch"
    assert fast.token_ids == plain.token_ids
    assert fast.text == plain.text
    assert fast.done.finish_reason == plain.done.finish_reason
    [stats] = path.recent_stats
    assert stats.num_cycles >= 1 and stats.acceptance_length >= 1.0


def test_prepare_loads_the_draft_and_runs_a_greedy_and_a_sampled_warm_up(model_and_draft):
    model_dir, draft_dir = model_and_draft
    target, _ = load(str(model_dir))
    cold = DFlashPath(draft_dir, warm_up=False)
    assert cold.prepare(target) == 0
    assert cold._draft is not None  # loaded at the model's load all the same
    warm = DFlashPath(draft_dir, warm_up=True)
    block = warm._generator_for(target).drafter.draft_block_size
    # Two passes of two whole blocks and a tail, each to its max_tokens (no EOS check).
    assert warm.prepare(target) == 2 * (2 * block + 2)
    assert not warm.recent_stats and not warm._is_active


def test_unsupported_sampling_and_long_prompts_use_the_batch(model_and_draft):
    model_dir, draft_dir = model_and_draft
    path = DFlashPath(draft_dir, max_context_tokens=40)
    top_p = request("hi", sampling=SamplingParams(temperature=0.7, top_p=0.9), max_tokens=4)
    long = request("word " * 60, max_tokens=4)
    results = _run(model_dir, {"tiny": path}, top_p)
    results += _run(model_dir, {"tiny": path}, long)
    assert [r.done.served_by for r in results] == ["batch", "batch"]


def test_concurrent_requests_take_one_dflash_slot_at_most(model_and_draft):
    model_dir, draft_dir = model_and_draft
    path = DFlashPath(draft_dir)
    results = _run(model_dir, {"tiny": path}, *(request(f"q{i}", max_tokens=8) for i in range(3)))
    served = [r.done.served_by for r in results]
    assert served.count("dflash") <= 1
    assert all(r.done.completion_tokens == 8 for r in results)


def test_unset_block_size_is_the_drafts_own_on_a_gpu_and_at_most_4_on_a_cpu(model_and_draft):
    import mlx.core as mx

    from omlx.draft.config import serving_block_size
    from omlx.settings import DraftSettings

    assert serving_block_size(16, gpu=True) == 16
    assert serving_block_size(16, gpu=False) == 4
    assert serving_block_size(2, gpu=False) == 2
    model_dir, draft_dir = model_and_draft
    target, _ = load(str(model_dir))
    on_this_device = 16 if mx.default_device().type == mx.DeviceType.gpu else 4
    auto = DFlashPath.from_settings(DraftSettings(path=str(draft_dir)))
    assert auto._generator_for(target).drafter.draft_block_size == on_this_device
    pinned = DFlashPath.from_settings(DraftSettings(path=str(draft_dir), block_size=8))
    assert pinned._generator_for(target).drafter.draft_block_size == 8


@pytest.mark.parametrize("decode_only", [False, True], ids=["kernel", "auto"])
def test_the_draft_follows_a_target_whose_verifies_take_the_kernel(model_and_draft, decode_only):
    """engine.decode_attention = "kernel" (and "auto" on CUDA, for DFlash's own passes)
    routes the target's verifies through omlx's CUDA kernel; the served draft's block
    attention then takes it too."""
    from omlx.mlx_lm_compat.attention_kernel import (
        restore_kernel_attention,
        use_kernel_attention,
    )

    model_dir, draft_dir = model_and_draft
    target, _ = load(str(model_dir))
    plain = DFlashPath(draft_dir)._generator_for(target)
    assert not any(layer.self_attn.attends_by_kernel for layer in plain.drafter.model.layers)
    use_kernel_attention(target, batched_decode_only=decode_only)
    try:
        draft = DFlashPath(draft_dir)._generator_for(target).drafter.model
        assert all(layer.self_attn.attends_by_kernel for layer in draft.layers)
    finally:
        restore_kernel_attention(target)
