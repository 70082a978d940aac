"""SlotKVCache: rows leave and join in place, and every live row reads what mlx-lm's
BatchKVCache holds for it after the same operations."""

from __future__ import annotations

import random

import mlx.core as mx
import pytest
from mlx_lm.models.cache import BatchKVCache

from omlx.mlx_lm_compat.slot_cache import SlotKVCache, swap_remove_order

H, D = 2, 4


def _prompt_cache(lengths: list[int], seed: int) -> BatchKVCache:
    """A left-padded prompt batch, as mlx-lm's prefill leaves it."""
    longest = max(lengths)
    cache = BatchKVCache([longest - n for n in lengths])
    k = mx.random.normal((len(lengths), H, longest, D), key=mx.random.key(seed))
    v = mx.random.normal((len(lengths), H, longest, D), key=mx.random.key(seed + 1))
    cache.update_and_fetch(k, v)
    return cache


def _rows(cache: BatchKVCache) -> list[tuple[list, list]]:
    """Each live row's keys and values from its first real position on."""
    keys, values = cache.keys_and_values()
    pads = cache.left_padding.tolist()
    assert cache.offset.tolist() == [cache._idx - p for p in pads]
    return [(keys[i, :, p:].tolist(), values[i, :, p:].tolist()) for i, p in enumerate(pads)]


def test_swap_remove_order_moves_only_rows_from_the_tail() -> None:
    assert swap_remove_order([0, 1, 2]) == [0, 1, 2]
    assert swap_remove_order([1, 2]) == [2, 1]
    assert swap_remove_order([0, 2, 3, 5]) == [0, 5, 2, 3]
    assert sorted(swap_remove_order([4, 7, 1])) == [1, 4, 7]


@pytest.mark.parametrize("wait", [True, False], ids=["cpu", "gpu-no-wait"])
@pytest.mark.parametrize("seed", range(6))
def test_random_joins_leaves_and_steps_match_mlx_lm(seed, wait, monkeypatch) -> None:
    from omlx.mlx_lm_compat import slot_cache

    monkeypatch.setattr(slot_cache, "waits_for_in_place", lambda: wait)
    rng = random.Random(seed)
    ref = _prompt_cache([5, 3, 7], seed)
    slot = SlotKVCache.adopt(_prompt_cache([5, 3, 7], seed))
    ref.step = slot.step = 16  # grow often
    order = [0, 1, 2]  # slot row -> reference row
    for t in range(40):
        n = len(order)
        op = rng.random()
        if op < 0.25 and n > 1:
            gone = set(rng.sample(range(n), rng.randint(1, min(3, n - 1))))
            keep = [i for i in range(n) if i not in gone]
            moved = swap_remove_order(keep)
            if rng.random() < 0.5:  # as a batch whose leaving rows read it hands it on
                slot.known_padding = slot.left_padding.tolist()
            slot.filter(moved)
            assert not hasattr(slot, "known_padding")
            ref_keep = sorted(order[i] for i in keep)
            ref.filter(ref_keep)
            order = [ref_keep.index(order[i]) for i in moved]
        elif op < 0.5:
            lengths = [rng.randint(1, 6) for _ in range(rng.randint(1, 3))]
            ref.extend(_prompt_cache(lengths, 100 * seed + t))
            slot.extend(_prompt_cache(lengths, 100 * seed + t))
            order += list(range(len(ref_rows := order), len(ref_rows) + len(lengths)))
        k = mx.random.normal((len(order), H, 1, D), key=mx.random.key(1000 * seed + t))
        v = mx.random.normal((len(order), H, 1, D), key=mx.random.key(2000 * seed + t))
        inv = [order.index(r) for r in range(len(order))]
        ref.update_and_fetch(k[mx.array(inv)], v[mx.array(inv)])
        slot.update_and_fetch(k, v)
        got, want = _rows(slot), _rows(ref)
        assert [got[order.index(r)] for r in range(len(order))] == want, t


def test_leaving_and_joining_keep_the_arrays(monkeypatch) -> None:
    """A leave and a join that fit the slots write rows, never regather the cache."""
    cache = SlotKVCache.adopt(_prompt_cache([4, 4, 4, 4], 0))
    cache.update_and_fetch(mx.zeros((4, H, 1, D)), mx.zeros((4, H, 1, D)))
    gathered = []
    real = SlotKVCache._gather_rows
    monkeypatch.setattr(SlotKVCache, "_gather_rows", lambda s, r: gathered.append(r) or real(s, r))
    cache.filter(swap_remove_order([0, 2, 3]))
    assert cache.rows == 3 and cache.capacity == 4
    cache.extend(_prompt_cache([2], 9))
    assert cache.rows == 4 and cache.capacity == 4
    assert gathered == []


def test_a_lone_row_starts_at_position_zero() -> None:
    """batch_join decodes a lone row without a mask, so no padding may precede it."""
    cache = SlotKVCache.adopt(_prompt_cache([6, 2, 4], 3))
    want = _rows(cache)[1]
    cache.filter(swap_remove_order([1]))
    assert cache.left_padding.tolist() == [0] and cache._idx == 2
    assert _rows(cache) == [want]


def test_slots_double_but_never_past_the_batch_size() -> None:
    cache = SlotKVCache.adopt(_prompt_cache([3, 3, 3, 3], 5), max_rows=6)
    cache.extend(_prompt_cache([2], 6))
    assert cache.rows == 5 and cache.capacity == 6  # 8 would pass the batch size
    unbounded = SlotKVCache.adopt(_prompt_cache([3, 3, 3, 3], 5))
    unbounded.extend(_prompt_cache([2], 6))
    assert unbounded.capacity == 8


def test_the_generator_reports_the_running_batch_kv_layout() -> None:
    """What the step trace records per step: positions filled and allocated, rows live
    and allocated; read from host-side state (it must not wait for the device)."""
    from omlx.mlx_lm_compat.batch_join import FusedJoinBatchGenerator
    from tests.mlx.draft.conftest import build_target

    model = build_target("qwen3")
    gen = FusedJoinBatchGenerator(model, stream=mx.new_stream(mx.default_device()))
    try:
        assert gen.kv_layout() == {}  # nothing running yet
        gen.insert([[1, 2, 3, 4, 5], [6, 7]], max_tokens=[3, 6])
        layouts = []
        for _ in range(5):
            gen.next_generated()
            layouts.append(gen.kv_layout())
        first = next(x for x in layouts if x)
        assert first["kv_rows"] == 2 and first["kv_slots"] >= 2
        assert 5 <= first["kv_len"] <= first["kv_positions"]
        last = layouts[-1]
        assert last["kv_rows"] == 1  # the 3-token row left
        assert last["kv_len"] > first["kv_len"]
    finally:
        gen.close()


def test_a_row_extracted_with_its_padding_read_once_equals_mlx_lms() -> None:
    cache = SlotKVCache.adopt(_prompt_cache([5, 2, 7], 3))
    cache.update_and_fetch(mx.ones((3, H, 1, D)), mx.zeros((3, H, 1, D)))
    pads = cache.left_padding.tolist()
    for i in range(3):
        got, want = cache.extract_row(i, pads[i]), BatchKVCache.extract(cache, i)
        assert got.offset == want.offset == cache._idx - pads[i]
        assert got.keys.tolist() == want.keys.tolist()
        assert got.values.tolist() == want.values.tolist()
        assert cache.extract(i).keys.tolist() == want.keys.tolist()


@pytest.mark.parametrize("waits", [True, False], ids=["cpu-way", "gpu-way"])
@pytest.mark.parametrize("rows", [[0, 1, 2], [2, 0], [1]])
def test_rows_extracted_from_one_gather_equal_mlx_lms(rows, waits, monkeypatch) -> None:
    """`waits`: the gather evaluated at once (CPU) or queued (GPU)."""
    from omlx.mlx_lm_compat import slot_cache

    monkeypatch.setattr(slot_cache, "waits_for_in_place", lambda: waits)
    cache = SlotKVCache.adopt(_prompt_cache([5, 2, 7], 3))
    cache.update_and_fetch(mx.ones((3, H, 1, D)), mx.zeros((3, H, 1, D)))
    pads = cache.left_padding.tolist()
    got = cache.extract_rows(rows, pads)
    wants = [BatchKVCache.extract(cache, i) for i in rows]
    cache.filter([i for i in range(3) if i not in rows])  # the batch moves on first
    cache.update_and_fetch(
        mx.full((3 - len(rows), H, 1, D), 5.0), mx.full((3 - len(rows), H, 1, D), 5.0)
    )
    for g, want in zip(got, wants, strict=True):
        assert g.offset == want.offset
        assert g.keys.tolist() == want.keys.tolist()  # cut when read, after the filter
        assert g.values.tolist() == want.values.tolist()
        assert g.state[0].tolist() == want.state[0].tolist()


@pytest.mark.parametrize("gather", [True, False], ids=["gpu-way", "cpu-way"])
def test_rows_leaving_together_read_each_layers_padding_once(monkeypatch, gather) -> None:
    """mlx-lm's extract reads the padding back per (row, layer): on a GPU a wait each.
    There the rows leaving in one step come from one gather a layer; on a CPU each row
    is copied out by itself."""
    from omlx.mlx_lm_compat import batch_join
    from omlx.mlx_lm_compat.batch_join import FusedJoinBatchGenerator
    from tests.mlx.draft.conftest import build_target

    monkeypatch.setattr(batch_join, "gathers_leaving_rows", lambda: gather)

    calls = {"extract": 0, "extract_row": 0, "extract_rows": []}
    rows_ = SlotKVCache.extract_rows

    def extract(self, idx):
        calls["extract"] += 1
        raise AssertionError("per-row padding read")

    row_ = SlotKVCache.extract_row

    def extract_row(self, idx, padding):
        calls["extract_row"] += 1
        assert not gather, "a row cut out in the leaving step"
        return row_(self, idx, padding)

    def extract_rows(self, rows, padding):
        calls["extract_rows"].append(len(rows))
        return rows_(self, rows, padding)

    handed_on = []
    filter_ = SlotKVCache.filter

    def filter(self, keep):
        handed_on.append(hasattr(self, "known_padding"))  # the filter reads no padding
        return filter_(self, keep)

    model = build_target("qwen3")
    gen = FusedJoinBatchGenerator(model, stream=mx.new_stream(mx.default_device()))
    try:
        gen.insert([[1, 2, 3, 4, 5], [6, 7], [8, 9, 10], [11]], max_tokens=[9, 4, 4, 4])
        monkeypatch.setattr(SlotKVCache, "extract", extract)
        monkeypatch.setattr(SlotKVCache, "extract_row", extract_row)
        monkeypatch.setattr(SlotKVCache, "extract_rows", extract_rows)
        monkeypatch.setattr(SlotKVCache, "filter", filter)
        finished = []
        for _ in range(12):
            finished += [r for r in gen.next_generated() if r.finish_reason]
        assert len(finished) == 4
        layers = len(model.layers)
        assert calls["extract"] == 0
        if gather:
            assert calls["extract_row"] == 0
            # one gather a layer per leaving step, of every row leaving in it
            gathers = calls["extract_rows"]
            steps = [gathers[i : i + layers] for i in range(0, len(gathers), layers)]
            assert all(len(set(step)) == 1 and len(step) == layers for step in steps)
            assert sum(step[0] for step in steps) == 4
            assert max(step[0] for step in steps) > 1  # rows did leave together
        else:
            assert calls["extract_row"] == 4 * layers and not calls["extract_rows"]
        assert handed_on and all(handed_on)  # when the three short rows left together
        for r in finished:  # each row's cache holds what it processed, every layer
            offsets = {c.offset for c in r.prompt_cache}
            assert len(offsets) == 1 and offsets.pop() >= 4
    finally:
        gen.close()
