"""Prefill pacing: the chunk gives prefill its share of each step's time."""

from __future__ import annotations

import random

from omlx.engine.scheduling import PrefillPacer, UidMap


def test_no_decoding_streams_get_the_largest_chunk():
    pacer = PrefillPacer(share=0.3, max_chunk_tokens=512)
    assert pacer.chunk_tokens(num_decoding=0, num_prefilling=1) == 512


def test_unmeasured_start_measures_decode_then_uses_a_prior():
    pacer = PrefillPacer(share=0.3, max_chunk_tokens=512)
    assert pacer.chunk_tokens(num_decoding=3, num_prefilling=1) == 0
    for _ in range(5):
        pacer.observe(step_s=0.01, num_decoding=3, prefill_tokens=0)
    # 30% of the step at 1/64 of a decode step per token: 64 * 3 / 7 = 27 tokens.
    assert pacer.chunk_tokens(num_decoding=3, num_prefilling=1) == 27


def test_chunk_converges_to_the_share():
    # Simulated engine: decode 10 ms per step, prefill 0.1 ms per token, 1 ms per call.
    pacer = PrefillPacer(share=0.3, max_chunk_tokens=4096)
    decode_total = prefill_total = 0.0
    for _ in range(200):
        n = pacer.chunk_tokens(num_decoding=4, num_prefilling=1)
        prefill_s = 0.001 + 0.0001 * n if n else 0.0
        pacer.observe(step_s=0.010 + prefill_s, num_decoding=4, prefill_tokens=n)
        decode_total += 0.010
        prefill_total += prefill_s
    share = prefill_total / (decode_total + prefill_total)
    assert 0.27 <= share <= 0.31  # running streams keep about 70% of their speed


def test_share_one_means_prefill_first():
    pacer = PrefillPacer(share=1.0, max_chunk_tokens=512)
    assert pacer.chunk_tokens(num_decoding=8, num_prefilling=2) == 512


def _measured(decode_s: float, token_s: float, num_decoding: int, **kw) -> PrefillPacer:
    pacer = PrefillPacer(**kw)
    for _ in range(5):
        pacer.observe(step_s=decode_s, num_decoding=num_decoding, prefill_tokens=0)
    pacer.token_s = token_s
    return pacer


def test_chunk_is_split_between_prefilling_sequences():
    pacer = _measured(0.01, 0.0001, 1, share=0.5, max_chunk_tokens=10_000)
    one = pacer.chunk_tokens(num_decoding=1, num_prefilling=1)
    four = pacer.chunk_tokens(num_decoding=1, num_prefilling=4)
    assert one == 100
    assert four == 25


def test_uid_map_round_trip():
    m = UidMap()
    m.add(7, "r1")
    assert m.request(7) == "r1"
    assert m.uid("r1") == 7
    assert m.pop("r1") == 7
    assert m.request(7) is None
    assert len(m) == 0


def test_budget_under_one_token_accumulates_across_steps():
    # Compute-bound: a prompt token costs as much as a decode step of 4 streams / 4.
    pacer = _measured(0.4, 0.4, 4, share=0.3, max_chunk_tokens=512)
    chunks = [pacer.chunk_tokens(num_decoding=4, num_prefilling=1) for _ in range(70)]
    assert set(chunks) == {0, 1}
    prefill_s = sum(chunks) * 0.4
    kept = (70 * 0.4) / (70 * 0.4 + prefill_s)  # decode speed kept by the running streams
    assert 0.69 <= kept <= 0.72


def _simulate(
    seed: int, decode_s: float, noise: float, token_s: float, call_s: float, steps: int = 400
) -> tuple[float, list[int]]:
    """Decode speed kept by the running streams, and the chunks, on a simulated engine."""
    rng = random.Random(seed)
    pacer = PrefillPacer(share=0.3, max_chunk_tokens=512)
    prefill_total, chunks = 0.0, []
    for _ in range(steps):
        n = pacer.chunk_tokens(num_decoding=4, num_prefilling=1)
        prefill = call_s + token_s * n if n else 0.0
        step = decode_s * rng.uniform(1 - noise, 1 + noise) + prefill
        pacer.observe(step_s=step, num_decoding=4, prefill_tokens=n)
        prefill_total += prefill
        chunks.append(n)
    return steps * decode_s / (steps * decode_s + prefill_total), chunks


def test_noisy_compute_bound_engine_keeps_about_70_percent():
    # A loaded CPU: decode 1 s +- 40%, a prompt token 0.25 s, 50 ms per prefill call.
    kept = [_simulate(seed, 1.0, 0.4, 0.25, 0.05)[0] for seed in range(8)]
    assert 0.66 <= sum(kept) / len(kept) <= 0.76
    quiet = [_simulate(seed, 1.0, 0.1, 0.25, 0.05)[0] for seed in range(4)]
    assert all(0.67 <= k <= 0.74 for k in quiet)


def test_noisy_fast_engine_does_not_get_stuck_on_tiny_chunks():
    # A tiny model on a loaded CPU: decode 10 ms +- 50%, 1 ms per call, 0.05 ms per token.
    kept, chunks = _simulate(1, 0.010, 0.5, 0.00005, 0.001)
    # The exact budget is (10 ms * 3/7 - 1 ms) / 0.05 ms = 65 tokens per step.
    assert 40 <= sum(chunks[-100:]) / 100 <= 90
    assert 0.64 <= kept <= 0.78


def test_memory_bound_engine_amortizes_the_prefill_call():
    # Each prefill call re-reads the weights (0.9 s, about a decode step); tokens are cheap.
    kept, chunks = _simulate(2, 1.0, 0.1, 0.01, 0.9, steps=600)
    tail = chunks[-200:]
    assert 0.66 <= kept <= 0.76
    assert max(tail) >= 32  # rare, large chunks ...
    assert sum(tail) / len(tail) >= 8  # ... prefill far more than the 0.43 token/step of 1s
