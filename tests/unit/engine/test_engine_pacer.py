"""Prefill pacing: the chunk gives prefill its share of each step's time."""

from __future__ import annotations

from omlx.engine.scheduling import PrefillPacer, UidMap


def test_no_decoding_streams_get_the_largest_chunk():
    pacer = PrefillPacer(share=0.3, max_chunk_tokens=512)
    assert pacer.chunk_tokens(num_decoding=0, num_prefilling=1) == 512


def test_unmeasured_start_is_conservative():
    pacer = PrefillPacer(share=0.3, max_chunk_tokens=512)
    assert pacer.chunk_tokens(num_decoding=3, num_prefilling=1) == 1


def test_chunk_converges_to_the_share():
    # Simulated engine: decode 10 ms per step, prefill 0.1 ms per token, 1 ms per call.
    pacer = PrefillPacer(share=0.3, max_chunk_tokens=4096)
    for _ in range(5):
        pacer.observe(step_s=0.010, num_decoding=4, prefill_tokens=0)
    for _ in range(40):
        n = pacer.chunk_tokens(num_decoding=4, num_prefilling=1)
        pacer.observe(step_s=0.010 + 0.001 + 0.0001 * n, num_decoding=4, prefill_tokens=n)
    n = pacer.chunk_tokens(num_decoding=4, num_prefilling=1)
    prefill_s = 0.001 + 0.0001 * n
    share = prefill_s / (0.010 + prefill_s)
    assert 0.25 <= share <= 0.31
    assert 0.010 / (0.010 + prefill_s) >= 0.7  # running streams keep >= 70% of their speed


def test_share_one_means_prefill_first():
    pacer = PrefillPacer(share=1.0, max_chunk_tokens=512)
    assert pacer.chunk_tokens(num_decoding=8, num_prefilling=2) == 512


def test_chunk_is_split_between_prefilling_sequences():
    pacer = PrefillPacer(share=0.5, max_chunk_tokens=10_000, decode_s=0.01, prefill_token_s=0.0001)
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
    pacer = PrefillPacer(share=0.3, max_chunk_tokens=512, decode_s=0.4, prefill_token_s=0.4)
    chunks = [pacer.chunk_tokens(num_decoding=4, num_prefilling=1) for _ in range(70)]
    assert set(chunks) == {0, 1}
    prefill_s = sum(chunks) * 0.4
    kept = (70 * 0.4) / (70 * 0.4 + prefill_s)  # decode speed kept by the running streams
    assert 0.69 <= kept <= 0.72
