"""Samplers: equal unseeded settings share one sampler, which samples a whole batch at once."""

from __future__ import annotations

from dataclasses import replace

import mlx.core as mx

from omlx.engine.api import SamplingParams
from omlx.engine.sampling import make_sampler

VOCAB = 64


def test_equal_unseeded_settings_share_a_sampler_seeded_ones_do_not() -> None:
    warm = SamplingParams(temperature=0.7, top_p=0.9, top_k=20, min_p=0.05)
    again = SamplingParams(temperature=0.7, top_p=0.9, top_k=20, min_p=0.05)
    assert make_sampler(warm, VOCAB) is make_sampler(again, VOCAB)
    assert make_sampler(warm, VOCAB) is not make_sampler(replace(warm, top_p=0.8), VOCAB)
    seeded = replace(warm, seed=7)
    assert make_sampler(seeded, VOCAB) is not make_sampler(seeded, VOCAB)


def test_a_shared_sampler_samples_each_row_of_a_batch_on_its_own() -> None:
    """Rows whose mass sits on different tokens keep them through the batched filters."""
    sampler = make_sampler(SamplingParams(temperature=0.7, top_p=0.9, top_k=5, min_p=0.1), VOCAB)
    peaks = [3, 41, 17, 60]
    logits = mx.full((len(peaks), VOCAB), -30.0)
    for row, token in enumerate(peaks):
        logits[row, token] = 10.0
    logprobs = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
    for _ in range(5):
        assert sampler(logprobs).tolist() == peaks
