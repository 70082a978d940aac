"""The pipelined greedy loop: drafting from a verify the host has not read back yet."""

from __future__ import annotations

import mlx.core as mx
import pytest

from omlx.draft.baseline import plain_generate
from omlx.draft.capture import TargetAdapter
from omlx.draft.loop import DFlashDrafter, DFlashGenerator, DFlashParams
from omlx.draft.random_init import draft_config_for, random_draft
from tests.mlx.draft.conftest import VOCAB
from tests.mlx.draft.oracle import OracleDrafter

PROMPT = [3, 17, 42, 99, 5, 128, 7, 64]


def test_hidden_rows_change_nothing_but_the_cache(tiny_target):
    """Drafting from a whole chunk with `num_valid` rows committed gives the hidden
    states of drafting from those rows alone; after the rest is trimmed, the next
    draft matches too (so the rows' positions were right)."""
    _, model = tiny_target
    draft = random_draft(draft_config_for(model), seed=3)
    width = len(draft.config.target_layer_ids) * draft.config.hidden_size
    mx.random.seed(5)
    prompt_ctx = mx.random.normal((1, 7, width))
    chunk = mx.random.normal((1, 16, width))
    block = mx.random.normal((1, 16, draft.config.hidden_size))
    later = mx.random.normal((1, 3, width))
    for valid in (1, 5, 16):
        masked, plain = draft.make_cache(), draft.make_cache()
        draft(block, prompt_ctx, masked)
        draft(block, prompt_ctx, plain)
        got = draft(block, chunk, masked, mx.array(valid))
        want = draft(block, chunk[:, :valid], plain)
        assert mx.allclose(got, want, atol=1e-5).item()
        for c in masked:
            c.trim(16 - valid)
        later_masked, later_plain = draft(block, later, masked), draft(block, later, plain)
        assert mx.allclose(later_masked, later_plain, atol=1e-5).item()


@pytest.mark.parametrize("max_tokens", [17, 40, 97])
def test_random_draft_pipelined_equals_plain_greedy(tiny_target, max_tokens):
    _, model = tiny_target
    draft = random_draft(draft_config_for(model), seed=1)
    generator = DFlashGenerator.from_models(model, draft)
    assert isinstance(generator.drafter, DFlashDrafter) and generator.drafter.can_pipeline
    calls = []
    propose = generator.drafter.propose_pipelined
    generator.drafter.propose_pipelined = lambda *a: calls.append(1) or propose(*a)
    params = DFlashParams(max_tokens=max_tokens)
    run = generator.generate(PROMPT, params)
    assert run.run() == plain_generate(model, PROMPT, params).tokens
    assert sum(run.stats.acceptance_lengths) == max_tokens - 1
    assert calls  # the pipelined loop ran (a whole block fit after the prefill)


def test_pipelined_oracle_drafts_from_unread_verifies(tiny_target):
    _, model = tiny_target
    cont = plain_generate(model, PROMPT, DFlashParams(max_tokens=90)).tokens
    oracle = OracleDrafter(PROMPT, cont, VOCAB, corrupt_at=5, pipelined=True)
    generator = DFlashGenerator(TargetAdapter(model, (1, 2)), oracle)
    run = generator.generate(PROMPT, DFlashParams(max_tokens=90))
    assert run.run() == cont
    # 6 tokens a cycle while a block fits (89 left after the prefill: 12 cycles leave
    # 17, then a 13th leaves 11 < 16), then the sequential loop finishes.
    assert run.stats.acceptance_lengths[:13] == [6] * 13
    assert oracle.pipelined_calls == 13  # drafts 2..14; the 14th was dropped unverified


def test_sync_phases_keeps_the_sequential_loop_and_sampling_pipelines(tiny_target):
    _, model = tiny_target
    cont = plain_generate(model, PROMPT, DFlashParams(max_tokens=40)).tokens
    for sync, temperature, pipelines in ((True, 0.0, False), (False, 0.7, True)):
        oracle = OracleDrafter(PROMPT, cont, VOCAB, pipelined=True, greedy=temperature == 0)
        generator = DFlashGenerator(TargetAdapter(model, (1, 2)), oracle, sync_phases=sync)
        params = DFlashParams(max_tokens=40, temperature=temperature)
        tokens = generator.generate(PROMPT, params).run()
        assert len(tokens) == 40
        assert oracle.calls > 0 and (oracle.pipelined_calls > 0) == pipelines


@pytest.mark.parametrize("draft_by_argmax", [True, False])
def test_sampled_pipelined_draws_what_the_sequential_loop_draws(tiny_target, draft_by_argmax):
    """Both loops draw the same random numbers in the same order (drafts, then the
    verify's uniforms, then its token), so one seed gives the same tokens (up to the
    tail, with sampled drafts). The oracle
    proposes the greedy chain, which sampling at a temperature this low mostly keeps."""
    _, model = tiny_target
    cont = plain_generate(model, PROMPT, DFlashParams(max_tokens=60)).tokens
    params = DFlashParams(max_tokens=41, temperature=0.05, draft_by_argmax=draft_by_argmax)
    runs = {}
    for pipelined in (False, True):
        oracle = OracleDrafter(
            PROMPT, cont, VOCAB, draft_block_size=4, pipelined=True, greedy=False
        )
        generator = DFlashGenerator(TargetAdapter(model, (1, 2)), oracle, pipelined=pipelined)
        mx.random.seed(77)
        run = generator.generate(PROMPT, params)
        runs[pipelined] = (run.run(), run.stats.acceptance_lengths)
        assert (oracle.pipelined_calls > 0) == pipelined
    if draft_by_argmax:
        assert runs[True] == runs[False]
    else:
        # Sampled drafts draw numbers too, and the pipelined loop drafts once more
        # before it hands the tail (less than a block left) to the sequential cycle:
        # the tokens agree up to there.
        head = params.max_tokens - 4 + 1
        assert runs[True][0][:head] == runs[False][0][:head]
    lengths = runs[True][1]
    assert max(lengths) > 1 and min(lengths) < 4  # drafts kept and drafts rejected
