"""The loop that queues cycle k + 1 before it reads cycle k (async_loop.py), on caches
whose lengths live on the device (device_cache.py)."""

from __future__ import annotations

import mlx.core as mx
import pytest

from omlx.draft import device_cache
from omlx.draft.baseline import plain_generate
from omlx.draft.capture import TargetAdapter
from omlx.draft.device_cache import DeviceOffsetKVCache
from omlx.draft.loop import DFlashGenerator, DFlashParams
from omlx.draft.random_init import draft_config_for, random_draft
from omlx.mlx_lm_compat import KVCache
from tests.mlx.draft.conftest import VOCAB, build_target
from tests.mlx.draft.oracle import DeviceOracleDrafter, OracleDrafter

PROMPT = [3, 17, 42, 99, 5, 128, 7, 64]


@pytest.fixture(scope="module", params=["llama", "qwen3"])
def target(request):
    return build_target(request.param)


@pytest.mark.parametrize("max_tokens", [1, 2, 17, 97])
def test_a_random_draft_decodes_what_plain_decoding_does(target, max_tokens):
    draft = random_draft(draft_config_for(target), seed=1)
    generator = DFlashGenerator.from_models(target, draft, queue_ahead=True)
    calls = []
    commit = generator.drafter.propose_committing
    generator.drafter.propose_committing = lambda *a: calls.append(1) or commit(*a)
    params = DFlashParams(max_tokens=max_tokens)
    run = generator.generate(PROMPT, params)
    assert run.run() == plain_generate(target, PROMPT, params).tokens
    assert sum(run.stats.acceptance_lengths) == max_tokens - 1
    assert bool(calls) == (max_tokens > 1)


@pytest.mark.parametrize("corrupt_at", [None, 0, 5, 14])
def test_kept_and_rejected_drafts_roll_back_on_the_device(target, corrupt_at, monkeypatch):
    """An oracle keeps corrupt_at drafts of every block (all of them without a
    corruption); small buckets and growth steps make the buffers grow many times."""
    monkeypatch.setattr(device_cache, "BUCKET_TOKENS", 32)
    monkeypatch.setattr(device_cache, "GROWTH_TOKENS", 32)
    cont = plain_generate(target, PROMPT, DFlashParams(max_tokens=150)).tokens
    oracle = DeviceOracleDrafter(PROMPT, cont, VOCAB, corrupt_at=corrupt_at)
    generator = DFlashGenerator(TargetAdapter(target, (1, 2)), oracle, queue_ahead=True)
    run = generator.generate(PROMPT, DFlashParams(max_tokens=150))
    assert run.run() == cont
    per_cycle = 16 if corrupt_at is None else corrupt_at + 1
    lengths = run.stats.acceptance_lengths
    assert lengths[:-1] == [per_cycle] * (len(lengths) - 1)
    assert 1 <= lengths[-1] <= per_cycle and sum(lengths) == 149
    # settled once a cycle, at the count of committed tokens but the last (the last
    # cycle's tokens past max_tokens are committed to the caches, not emitted)
    want = [len(PROMPT) + sum(lengths[: i + 1]) for i in range(len(lengths))]
    assert oracle.settled[:-1] == want[:-1] and oracle.settled[-1] >= want[-1]


def test_targets_it_cannot_serve_keep_the_pipelined_loop():
    """Recurrent layers (tape replay) and a drafter without device caches."""
    hybrid = build_target("qwen3_5")
    draft = random_draft(draft_config_for(hybrid), seed=1)
    generator = DFlashGenerator.from_models(hybrid, draft, queue_ahead=True)
    generator.drafter.propose_committing = None  # would fail if called
    params = DFlashParams(max_tokens=40)
    assert generator.generate(PROMPT, params).run() == plain_generate(hybrid, PROMPT, params).tokens
    llama = build_target("llama")
    cont = plain_generate(llama, PROMPT, DFlashParams(max_tokens=40)).tokens
    oracle = OracleDrafter(PROMPT, cont, VOCAB, corrupt_at=3, pipelined=True)
    generator = DFlashGenerator(TargetAdapter(llama, (1, 2)), oracle, queue_ahead=True)
    run = generator.generate(PROMPT, params)
    assert run.run() == cont and oracle.pipelined_calls > 0


def test_sampling_draws_what_the_sequential_loop_draws(target):
    """Drafts by argmax, the target samples: both loops draw the verify's numbers in
    the same order, so one seed gives the same tokens up to the tail (where the
    sequential loop verifies a shorter block)."""
    draft = random_draft(draft_config_for(target), seed=1)
    params = DFlashParams(max_tokens=60, temperature=0.7, draft_by_argmax=True)
    runs = {}
    for pipelined in (False, True):
        generator = DFlashGenerator.from_models(
            target, draft, pipelined=pipelined, queue_ahead=True
        )
        mx.random.seed(11)
        runs[pipelined] = generator.generate(PROMPT, params).run()
    head = params.max_tokens - 16
    assert runs[True][:head] == runs[False][:head]


def test_the_cache_masks_what_it_has_not_committed():
    """Against host-offset KVCaches that trim: the same keys in the same places in every
    layer, every key past a query's position masked, and one length for all layers."""
    mx.random.seed(3)
    hosts = [KVCache(), KVCache()]
    for host in hosts:
        host.update_and_fetch(mx.random.normal((1, 2, 5, 4)), mx.random.normal((1, 2, 5, 4)))
    devs, length = DeviceOffsetKVCache.from_caches(hosts)
    assert all(dev.length is length for dev in devs) and length.offset.item() == 5
    for num_valid in (3, 1, 4):
        start = hosts[0].offset
        mask = devs[0].make_mask(4)
        for dev, host in zip(devs, hosts, strict=True):
            block = mx.random.normal((1, 2, 4, 4)), mx.random.normal((1, 2, 4, 4))
            keys, _ = dev.update_and_fetch(*block)
            assert dev.offset.item() == start  # later layers still rotate from it
            host.update_and_fetch(*block)
            host.trim(4 - num_valid)
        length.commit(mx.array(num_valid), 4)
        assert keys.shape[2] == mask.shape[1] >= start + 4
        assert mask.tolist() == [[s <= start + i for s in range(keys.shape[2])] for i in range(4)]
        n = hosts[0].offset
        assert length.offset.item() == n and length.bound >= n
        for dev, host in zip(devs, hosts, strict=True):
            assert mx.array_equal(dev.keys[..., :n, :], host.keys[..., :n, :]).item()
        length.settle(n)
        assert length.bound == n


def test_placing_the_length_moves_where_the_next_block_is_written():
    """`place` sets the length outright (a pass repeated over one context, a compiled
    pass's input): the next write lands there, not at the index built before it."""
    dev, length = DeviceOffsetKVCache.from_caches([KVCache()])
    dev[0].update_and_fetch(mx.ones((1, 1, 3, 2)), mx.ones((1, 1, 3, 2)))
    length.commit(3, 3)
    dev[0].update_and_fetch(mx.full((1, 1, 1, 2), 5.0), mx.full((1, 1, 1, 2), 5.0))  # at 3
    length.place(mx.array(1, dtype=mx.int32), 1)
    dev[0].update_and_fetch(mx.full((1, 1, 1, 2), 7.0), mx.full((1, 1, 1, 2), 7.0))
    assert dev[0].keys[0, 0, :4, 0].tolist() == [1.0, 7.0, 1.0, 5.0]
    assert length.bound == 1 and dev[0].make_mask(1).shape[1] == length.width(1)
