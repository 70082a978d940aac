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


def test_samplers_marked_for_raw_logits_draw_the_same_from_shifted_ones() -> None:
    """The batch skips normalising when every row's sampler is marked: each marked sampler
    must draw exactly what it draws from the normalised log-probs (same key); top-p, which
    exponentiates, stays unmarked."""
    from omlx.mlx_lm_compat.batch_join import TAKES_LOGITS

    logits = mx.random.normal((6, VOCAB), key=mx.random.key(3)) * 4 + 37.0
    logprobs = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
    marked = [
        SamplingParams(temperature=0.0),
        SamplingParams(temperature=0.8, seed=11),
        SamplingParams(temperature=1.3, min_p=0.05, seed=12),
        SamplingParams(temperature=0.6, top_k=7, seed=13),
    ]
    for params in marked:
        from_logits, from_logprobs = make_sampler(params, VOCAB), make_sampler(params, VOCAB)
        assert getattr(from_logits, TAKES_LOGITS, False), params
        for _ in range(4):
            assert from_logits(logits).tolist() == from_logprobs(logprobs).tolist(), params
    top_p = make_sampler(SamplingParams(temperature=0.8, top_p=0.9), VOCAB)
    assert not getattr(top_p, TAKES_LOGITS, False)
