"""FusedJoinBatchGenerator emits what mlx-lm's BatchGenerator emits, with fewer forwards."""

from __future__ import annotations

import mlx.core as mx
import pytest
from mlx_lm.generate import BatchGenerator, StopSequences
from mlx_lm.sample_utils import make_logits_processors

from omlx.mlx_lm_compat.batch_join import FusedJoinBatchGenerator
from tests.fixtures.tiny_models import build_tiny_in_memory

# Differential against stock mlx-lm: `pytest -m mlx_lm_diff` checks a newer mlx-lm.
pytestmark = [pytest.mark.timeout(120), pytest.mark.mlx_lm_diff]

# (step to insert at, prompt, max_tokens, stop token or None, repetition penalty or None)
ARRIVALS = [
    (0, [5, 9, 14, 3, 7, 2], 12, None, None),
    (0, [8, 1, 4], 1, None, None),  # max_tokens=1: its one token is its first
    (2, [11, 12, 13, 14, 15, 16, 17, 18, 19], 9, None, 1.3),
    (3, [4], 7, None, None),  # a one-token prompt: nothing to prefill but the join
    (3, [6, 6, 6, 2, 1], 10, None, None),
    (7, [20, 21, 22, 23], 15, None, None),
]


class CountingModel:
    """Wraps a model to count forward passes (what a join used to cost)."""

    def __init__(self, model):
        self.model, self.calls = model, 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.model(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.model, name)


def run(generator_class, model, arrivals, stop_of=None):
    """Per-arrival token lists and finish reasons, and the number of forward passes."""
    counting = CountingModel(model)
    gen = generator_class(counting, completion_batch_size=8, prefill_batch_size=2)
    uid_of, out, reasons, step = {}, {}, {}, 0
    pending = list(enumerate(arrivals))
    while pending or len(reasons) < len(arrivals):
        for i, (at, prompt, max_tokens, stop, penalty) in [p for p in pending if p[1][0] <= step]:
            pending.remove((i, (at, prompt, max_tokens, stop, penalty)))
            stops = StopSequences([(stop,)] if stop is not None else None)
            procs = make_logits_processors(repetition_penalty=penalty) if penalty else []
            [uid] = gen.insert(
                [prompt],
                max_tokens=[max_tokens],
                stop_sequences=[stops],
                logits_processors=[procs],
            )
            uid_of[uid] = i
            out[i] = []
        _, responses = gen.next()
        for r in responses:
            i = uid_of[r.uid]
            out[i].append(r.token)
            if r.finish_reason is not None:
                reasons[i] = (r.finish_reason, list(r.all_tokens))
        step += 1
        assert step < 400, "generation did not finish"
    gen.close()
    return out, reasons, counting.calls


@pytest.fixture(scope="module")
def model():
    m = build_tiny_in_memory("llama")
    mx.eval(m.parameters())
    return m


def test_greedy_tokens_and_finish_reasons_match_mlx_lm(model):
    ref, ref_reasons, ref_calls = run(BatchGenerator, model, ARRIVALS)
    got, got_reasons, got_calls = run(FusedJoinBatchGenerator, model, ARRIVALS)
    assert got == ref
    assert got_reasons == ref_reasons  # including all_tokens, the cache's token list
    assert [len(got[i]) for i in range(len(ARRIVALS))] == [a[2] for a in ARRIVALS]
    # mlx-lm runs one extra forward per group of joining sequences; fused runs none.
    assert got_calls < ref_calls


def test_stop_token_as_first_generated_token_and_as_last_prompt_token(model):
    # The stop token the reference generates first for one prompt; a prompt ending in it
    # must not stop before generating (the prompt token is never stop-matched).
    ref, _, _ = run(BatchGenerator, model, [(0, [5, 9, 14], 6, None, None)])
    first = ref[0][0]
    arrivals = [
        (0, [5, 9, 14], 6, first, None),
        (1, [3, 4, first], 5, first, None),
        (1, [7, 7, 8], 8, None, None),
    ]
    ref, ref_reasons, _ = run(BatchGenerator, model, arrivals)
    got, got_reasons, _ = run(FusedJoinBatchGenerator, model, arrivals)
    assert got == ref and got_reasons == ref_reasons
    assert got[0] == [first] and got_reasons[0][0] == "stop"


def test_removing_a_sequence_before_its_first_token(model):
    gen = FusedJoinBatchGenerator(model, completion_batch_size=8, prefill_batch_size=4)
    [a, b] = gen.insert([[5, 9, 14, 3], [8, 1, 4]], max_tokens=[6, 6])
    gen.next()  # prefill; both join primed
    gen.remove([a])
    tokens = []
    for _ in range(10):
        _, responses = gen.next()
        assert all(r.uid == b for r in responses)
        tokens += [r.token for r in responses]
    gen.close()
    ref, _, _ = run(BatchGenerator, model, [(0, [8, 1, 4], 6, None, None)])
    assert tokens == ref[0]


def test_a_lone_row_decodes_unmasked_with_mlx_lm_s_tokens(model, monkeypatch):
    # The short prompt is left-padded beside the long one; once the long one finishes it
    # decodes alone, its padding shifted away, through the maskless path.
    from omlx.mlx_lm_compat import batch_join as fused_join

    unmasked = []
    real = fused_join._mask_unless_one_query

    def spy(make_mask, n, return_array=False, window_size=None):
        got = real(make_mask, n, return_array, window_size)
        unmasked.append(got is None)
        return got

    monkeypatch.setattr(fused_join, "_mask_unless_one_query", spy)
    arrivals = [
        (0, [5, 9, 14, 3, 7, 2, 11, 4, 8], 3, None, None),
        (0, [6, 1], 12, None, None),
        (14, [3, 3, 9, 10, 2], 6, None, None),  # alone from the start
    ]
    ref, ref_reasons, _ = run(BatchGenerator, model, arrivals)
    got, got_reasons, _ = run(FusedJoinBatchGenerator, model, arrivals)
    assert got == ref and got_reasons == ref_reasons
    assert any(unmasked)  # the lone-row path ran


def test_on_cuda_caches_grow_off_multiples_of_256_with_the_same_tokens(model, monkeypatch):
    # MLX sends a maskless one-row decode to cuDNN when the cache's capacity is a multiple
    # of 256 (slower there, and a graph build per capacity); on CUDA caches grow by 264.
    from omlx.mlx_lm_compat import batch_join as fused_join

    arrivals = [(0, [5, 9, 14, 3, 7, 2], 300, None, None)]
    ref, ref_reasons, _ = run(BatchGenerator, model, arrivals)
    monkeypatch.setattr(mx.cuda, "is_available", lambda: True)
    capacities = set()
    real_step = fused_join.PrimedGenerationBatch._decode_step

    def spy(self):
        capacities.add(self.prompt_cache[0].keys.shape[2])
        return real_step(self)

    monkeypatch.setattr(fused_join.PrimedGenerationBatch, "_decode_step", spy)
    got, got_reasons, _ = run(FusedJoinBatchGenerator, model, arrivals)
    assert got == ref and got_reasons == ref_reasons
    assert capacities == {fused_join.CUDA_KV_STEP, 2 * fused_join.CUDA_KV_STEP}
    assert all(c % 256 for c in capacities)


class CountingBias:
    """omlx's LogitBias, counting its per-row calls (the batched path makes none)."""

    calls = 0

    def __init__(self, bias):
        from omlx.engine.sampling import LogitBias

        self.inner = LogitBias(bias)
        self.batched_bias = self.inner.batched_bias

    def __call__(self, tokens, logits):
        CountingBias.calls += 1
        return self.inner(tokens, logits)


def run_biased(generator_class, model, rows):
    """rows: (prompt, max_tokens, processors); all inserted at once, greedy."""
    gen = generator_class(model, completion_batch_size=8, prefill_batch_size=8)
    uids = gen.insert(
        [r[0] for r in rows],
        max_tokens=[r[1] for r in rows],
        logits_processors=[r[2] for r in rows],
    )
    out = {uid: [] for uid in uids}
    for _ in range(100):
        _, responses = gen.next()
        for r in responses:
            out[r.uid].append(r.token)
        if all(len(out[u]) == rows[i][1] for i, u in enumerate(uids)):
            break
    gen.close()
    return [out[u] for u in uids]


def test_logit_bias_rows_decode_in_one_scatter_with_mlx_lm_s_tokens(model):
    # Row 0's greedy tokens, banned on row 1 (same prompt), forced on row 2; row 3 has none.
    plain = run_biased(BatchGenerator, model, [([5, 9, 14, 3], 6, [])])[0]
    rows = [
        ([5, 9, 14, 3], 6, []),
        ([5, 9, 14, 3], 6, [CountingBias({t: -100.0 for t in plain})]),
        ([8, 1, 4], 5, [CountingBias({17: 50.0, 3: -2.5})]),
        ([6, 6, 2], 7, []),
    ]
    ref = run_biased(BatchGenerator, model, rows)
    CountingBias.calls = 0
    got = run_biased(FusedJoinBatchGenerator, model, rows)
    assert got == ref
    assert CountingBias.calls == 0  # every step applied the biases batched
    assert got[0] == plain and not set(got[1]) & set(plain) and got[2] == [17] * 5


def test_a_row_with_a_context_processor_keeps_the_per_row_path(model):
    rows = [
        ([5, 9, 14, 3], 6, [CountingBias({17: 50.0})]),
        ([8, 1, 4], 6, make_logits_processors(repetition_penalty=1.3)),
    ]
    ref = run_biased(BatchGenerator, model, rows)
    CountingBias.calls = 0
    got = run_biased(FusedJoinBatchGenerator, model, rows)
    assert got == ref and CountingBias.calls > 0


def test_rows_of_raw_logit_samplers_are_not_normalised_and_read_back_equal(model):
    """With every row's sampler marked `takes_logits` the step skips the log-softmax;
    `row_logprobs` then gives what the normalised step gives, and the tokens are equal."""
    from omlx.mlx_lm_compat.batch_join import row_logprobs, takes_logits

    def argmax(x):
        return mx.argmax(x, axis=-1)

    def collect(sampler):
        gen = FusedJoinBatchGenerator(model, completion_batch_size=4, prefill_batch_size=2)
        gen.insert([[5, 9, 14], [8, 1, 4, 2]], max_tokens=[6, 6], samplers=[sampler, sampler])
        rows: dict[int, list] = {}
        while len(rows) < 2 or any(len(v) < 6 for v in rows.values()):
            _, responses = gen.next()
            for r in responses:
                rows.setdefault(r.uid, []).append((r.token, r.logprobs))
        gen.close()
        return [rows[uid] for uid in sorted(rows)]

    normalised = collect(argmax)
    raw = collect(takes_logits(lambda x: mx.argmax(x, axis=-1)))
    shifted = False
    for ref_row, raw_row in zip(normalised, raw, strict=True):
        assert [t for t, _ in ref_row] == [t for t, _ in raw_row]
        for (_, ref_lp), (_, raw_lp) in zip(ref_row[1:], raw_row[1:], strict=True):
            shifted |= abs(mx.logsumexp(raw_lp).item()) > 1e-3  # really left unnormalised
            assert mx.allclose(row_logprobs(raw_lp), ref_lp, atol=1e-5).item()
            assert mx.allclose(row_logprobs(ref_lp), ref_lp, atol=1e-5).item()
    assert shifted
