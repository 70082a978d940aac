"""DFlash under an output grammar: drafts are checked against it, every committed token
is one it allows, and greedy output equals plain greedy decoding under the same mask."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm.generate import generate_step

from omlx.draft.capture import TargetAdapter
from omlx.draft.loop import DFlashGenerator, DFlashParams
from omlx.draft.random_init import draft_config_for, random_draft
from tests.mlx.draft.conftest import VOCAB
from tests.mlx.draft.oracle import OracleDrafter

pytestmark = pytest.mark.timeout(120)

PROMPT = [3, 17, 42, 99, 5, 128, 7, 64]
PERIOD = 4


class EveryFourth:
    """A grammar whose token at output position t must be t modulo 4 (mod 4).

    `consume` fails the test on a token the grammar refuses: nothing refused may be
    committed, and a draft walk may only feed what the mask allowed.
    """

    def __init__(self) -> None:
        self.position = 0
        self.max_position = 0

    def keep(self, vocab: int) -> np.ndarray:
        keep = np.zeros(vocab, dtype=bool)
        keep[self.position % PERIOD :: PERIOD] = True
        return keep

    def consume(self, tokens: list[int]) -> None:
        for token in tokens:
            assert token % PERIOD == self.position % PERIOD, (token, self.position)
            self.position += 1
        self.max_position = max(self.max_position, self.position)

    def rollback(self, num_tokens: int) -> None:
        self.position -= num_tokens


def _masked_greedy(model, n: int) -> list[int]:
    """Plain greedy decoding through mlx-lm with the grammar as a logits processor."""

    def mask(tokens: mx.array, logits: mx.array) -> mx.array:
        position = tokens.size - len(PROMPT)
        keep = mx.arange(logits.shape[-1]) % PERIOD == position % PERIOD
        return mx.where(keep, logits, -mx.inf)

    steps = generate_step(
        mx.array(PROMPT),
        model,
        max_tokens=n,
        sampler=lambda logprobs: mx.argmax(logprobs, axis=-1),
        logits_processors=[mask],
    )
    return [int(t) for t, _ in steps]


def _oracle(model, continuation, corrupt_at=None) -> DFlashGenerator:
    oracle = OracleDrafter(PROMPT, continuation, VOCAB, corrupt_at=corrupt_at)
    return DFlashGenerator(TargetAdapter(model, (1, 2)), oracle)


def test_random_draft_greedy_equals_masked_plain_greedy(tiny_target):
    _, model = tiny_target
    draft = random_draft(draft_config_for(model), seed=1)
    generator = DFlashGenerator.from_models(model, draft)
    grammar = EveryFourth()
    tokens = [
        t
        for commit in generator.commits(PROMPT, DFlashParams(max_tokens=40), None, grammar)
        for t in commit
    ]
    assert tokens == _masked_greedy(model, 40)
    assert grammar.position == 40


def test_oracle_blocks_walk_the_grammar_and_are_accepted_whole(tiny_target):
    _, model = tiny_target
    cont = _masked_greedy(model, 70)
    generator = _oracle(model, cont)
    grammar = EveryFourth()
    commits = list(generator.commits(PROMPT, DFlashParams(max_tokens=1 + 16 * 4), None, grammar))
    assert [len(c) for c in commits] == [1, 16, 16, 16, 16]
    assert [t for c in commits for t in c] == cont[:65]
    # Each cycle walked its 15 drafts ahead and rolled them back past what it committed.
    assert grammar.position == 65 and grammar.max_position == 65


@pytest.mark.parametrize("j", [0, 5, 14])
def test_a_refused_draft_ends_acceptance_there(tiny_target, j):
    _, model = tiny_target
    cont = _masked_greedy(model, 40)
    # The corrupted draft (token + 1) is off by one modulo 4: the grammar refuses it.
    generator = _oracle(model, cont, corrupt_at=j)
    grammar = EveryFourth()
    commits = list(generator.commits(PROMPT, DFlashParams(max_tokens=33), None, grammar))
    assert commits[1] == cont[1 : j + 2]  # j drafts accepted, then the target's own token
    assert [t for c in commits for t in c] == cont[:33]


def test_sampled_tokens_all_fit_the_grammar(tiny_target):
    _, model = tiny_target
    draft = random_draft(draft_config_for(model), seed=2)
    generator = DFlashGenerator.from_models(model, draft)
    mx.random.seed(3)
    for draft_by_argmax in (False, True):
        grammar = EveryFourth()  # its consume() checks every committed token
        params = DFlashParams(max_tokens=48, temperature=1.0, draft_by_argmax=draft_by_argmax)
        tokens = [t for c in generator.commits(PROMPT, params, None, grammar) for t in c]
        assert len(tokens) == 48 and grammar.position == 48
