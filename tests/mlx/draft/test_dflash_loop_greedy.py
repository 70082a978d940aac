"""DFlash greedy decoding is lossless: it emits exactly what plain greedy decoding emits."""

from __future__ import annotations

import pytest

from omlx.draft.baseline import plain_generate
from omlx.draft.capture import TargetAdapter
from omlx.draft.loop import DFlashGenerator, DFlashParams
from omlx.draft.random_init import draft_config_for, random_draft
from tests.mlx.draft.conftest import VOCAB
from tests.mlx.draft.oracle import OracleDrafter

# Differential against stock mlx-lm: `pytest -m mlx_lm_diff` checks a newer mlx-lm.
pytestmark = pytest.mark.mlx_lm_diff

PROMPT = [3, 17, 42, 99, 5, 128, 7, 64]


def _continuation(model, n: int) -> list[int]:
    return plain_generate(model, PROMPT, DFlashParams(max_tokens=n)).tokens


def _oracle_generator(model, continuation, corrupt_at=None, pipelined=False) -> DFlashGenerator:
    target = TargetAdapter(model, (1, 2))
    oracle = OracleDrafter(PROMPT, continuation, VOCAB, corrupt_at=corrupt_at, pipelined=pipelined)
    return DFlashGenerator(target, oracle, decode=_toy_decode)


# Both greedy loops: `_cycle` (sequential) and the pipelined one (drafts before it
# reads the verify back); a test below checks the pipelined one really ran.
both_loops = pytest.mark.parametrize("pipelined", [False, True], ids=["sequential", "pipelined"])


def _toy_decode(ids: list[int]) -> str:
    return "".join(chr(ord("a") + i % 26) for i in ids)


def test_random_draft_output_equals_plain_greedy(tiny_target):
    _, model = tiny_target
    draft = random_draft(draft_config_for(model), seed=1)
    generator = DFlashGenerator.from_models(model, draft)
    params = DFlashParams(max_tokens=48)
    run = generator.generate(PROMPT, params)
    assert run.run() == plain_generate(model, PROMPT, params).tokens
    assert run.finish_reason == "length"
    assert sum(run.stats.acceptance_lengths) == 47  # every token but the prefill's


@both_loops
def test_oracle_draft_commits_whole_blocks(tiny_target, pipelined):
    _, model = tiny_target
    cont = _continuation(model, 80)
    generator = _oracle_generator(model, cont, pipelined=pipelined)
    run = generator.generate(PROMPT, DFlashParams(max_tokens=1 + 16 * 4))
    assert run.run() == cont[:65]
    assert run.stats.acceptance_lengths == [16, 16, 16, 16]
    assert run.stats.acceptance_length == 16.0
    assert run.stats.histogram()[16] == 4


@both_loops
@pytest.mark.parametrize("j", [0, 3, 14])
def test_corrupted_oracle_commits_j_plus_one(tiny_target, j, pipelined):
    _, model = tiny_target
    cont = _continuation(model, 60)
    generator = _oracle_generator(model, cont, corrupt_at=j, pipelined=pipelined)
    run = generator.generate(PROMPT, DFlashParams(max_tokens=1 + (j + 1) * 3))
    assert run.run() == cont[: 1 + (j + 1) * 3]
    assert run.stats.acceptance_lengths == [j + 1] * 3
    assert run.stats.acceptance_length == j + 1


@both_loops
def test_eos_inside_accepted_run(tiny_target, pipelined):
    _, model = tiny_target
    cont = _continuation(model, 40)
    k = next(i for i in range(3, 12) if cont[i] not in cont[:i])
    generator = _oracle_generator(model, cont, pipelined=pipelined)
    run = generator.generate(PROMPT, DFlashParams(max_tokens=40, eos_token_ids=(cont[k],)))
    assert run.run() == cont[:k]  # EOS ends the run and is not emitted
    assert run.finish_reason == "stop"
    plain = plain_generate(model, PROMPT, DFlashParams(max_tokens=40, eos_token_ids=(cont[k],)))
    assert plain.tokens == cont[:k]


@both_loops
def test_max_tokens_mid_block(tiny_target, pipelined):
    _, model = tiny_target
    cont = _continuation(model, 40)
    generator = _oracle_generator(model, cont, pipelined=pipelined)
    run = generator.generate(PROMPT, DFlashParams(max_tokens=10))
    assert run.run() == cont[:10]
    assert run.finish_reason == "length"
    assert run.stats.acceptance_lengths == [9]  # the verify block was cut to fit


@both_loops
def test_stop_string_inside_block(tiny_target, pipelined):
    _, model = tiny_target
    cont = _continuation(model, 40)
    text = _toy_decode(cont)
    stop = text[6:8]
    end = text.find(stop) + len(stop)
    generator = _oracle_generator(model, cont, pipelined=pipelined)
    run = generator.generate(PROMPT, DFlashParams(max_tokens=40, stop=(stop,)))
    assert run.run() == cont[:end]
    assert run.finish_reason == "stop"
    assert _toy_decode(run.tokens).endswith(stop)


@both_loops
def test_streams_tokens_incrementally(tiny_target, pipelined):
    _, model = tiny_target
    cont = _continuation(model, 40)
    run = _oracle_generator(model, cont, pipelined=pipelined).generate(
        PROMPT, DFlashParams(max_tokens=33)
    )
    first = next(iter(run))
    assert first == cont[0]
    assert run.stats.num_cycles == 0  # nothing drafted before the first token is out
    assert [first, *run] == cont[:33]


def test_suppressed_tokens_are_never_emitted(tiny_target):
    _, model = tiny_target
    cont = _continuation(model, 20)
    banned = tuple(sorted(set(cont[:6])))
    params = DFlashParams(max_tokens=20, suppress_token_ids=banned)
    draft = random_draft(draft_config_for(model), seed=1)
    run = DFlashGenerator.from_models(model, draft).generate(PROMPT, params)
    tokens = run.run()
    assert not set(tokens) & set(banned)
    assert tokens == plain_generate(model, PROMPT, params).tokens
