"""Temperature sampling through DFlash emits tokens distributed as the target's own."""

from __future__ import annotations

import math
from collections import Counter

import mlx.core as mx
import numpy as np
import pytest

from omlx.draft.loop import DFlashGenerator, DFlashParams
from omlx.draft.random_init import draft_config_for, random_draft
from omlx.draft.sampling import probabilities, speculative_accept, speculative_outcome
from tests.mlx.draft.conftest import build_target

TOY_VOCAB = 8
PROMPT = [1, 5, 2, 7, 3]
TEMPERATURE = 1.0


def _chi_square_ok(counts: Counter, expected_probs: dict, n: int) -> tuple[bool, float, float]:
    """Pearson's test at p ≈ 0.0005, pooling cells expected below 5 counts."""
    stat, pooled_obs, pooled_exp, cells = 0.0, 0, 0.0, 0
    for key, p in expected_probs.items():
        exp = p * n
        if exp < 5:
            pooled_obs += counts.get(key, 0)
            pooled_exp += exp
            continue
        stat += (counts.get(key, 0) - exp) ** 2 / exp
        cells += 1
    if pooled_exp > 0:
        stat += (pooled_obs - pooled_exp) ** 2 / max(pooled_exp, 1e-9)
        cells += 1
    dof = max(cells - 1, 1)
    z = 3.29  # Wilson-Hilferty quantile of chi-square(dof) at 1 - 0.0005
    critical = dof * (1 - 2 / (9 * dof) + z * math.sqrt(2 / (9 * dof))) ** 3
    return stat < critical, stat, critical


def _next_probs(model, prefixes: list[list[int]]) -> np.ndarray:
    logits = model(mx.array(prefixes))[:, -1]
    return np.array(probabilities(logits, TEMPERATURE))


def _exact_joint(model) -> tuple[dict, dict]:
    """P(x1, x2) and P(x3) of the target's own temperature sampling after PROMPT."""
    p1 = _next_probs(model, [PROMPT])[0]
    p2 = _next_probs(model, [[*PROMPT, a] for a in range(TOY_VOCAB)])
    pairs = [(a, b) for a in range(TOY_VOCAB) for b in range(TOY_VOCAB)]
    p3 = _next_probs(model, [[*PROMPT, a, b] for a, b in pairs])
    joint = {(a, b): float(p1[a] * p2[a, b]) for a, b in pairs}
    third = {
        c: sum(joint[pair] * float(p3[i, c]) for i, pair in enumerate(pairs))
        for c in range(TOY_VOCAB)
    }
    return joint, third


# Blocks of 4 over 3 tokens: one sequential cycle. Blocks of 2 over 3 tokens: the
# pipelined loop (its second draft is built before the first verify is read).
# Each case takes 25-45 s on 2 cores: one stays in the quick tier, the others are slow.
@pytest.mark.parametrize(
    ("draft_by_argmax", "block_size"),
    [
        pytest.param(False, 4, id="False-sequential"),
        pytest.param(False, 2, id="False-pipelined", marks=pytest.mark.slow),
        pytest.param(True, 4, id="True-sequential", marks=pytest.mark.slow),
        pytest.param(True, 2, id="True-pipelined", marks=pytest.mark.slow),
    ],
)
def test_emitted_distribution_matches_target(draft_by_argmax, block_size):
    model = build_target("qwen3", seed=3, vocab_size=TOY_VOCAB, num_hidden_layers=2)
    draft = random_draft(draft_config_for(model, block_size=block_size), seed=4)
    generator = DFlashGenerator.from_models(model, draft)
    if block_size == 2:
        spy = generator.drafter.propose_pipelined
        calls: list[int] = []
        generator.drafter.propose_pipelined = lambda *a: calls.append(1) or spy(*a)
    params = DFlashParams(max_tokens=3, temperature=TEMPERATURE, draft_by_argmax=draft_by_argmax)
    mx.random.seed(1234)
    n = 1500
    pairs, thirds, kept = Counter(), Counter(), 0
    for _ in range(n):
        run = generator.generate(PROMPT, params)
        tokens = run.run()
        pairs[(tokens[0], tokens[1])] += 1
        thirds[tokens[2]] += 1
        kept += run.stats.acceptance_lengths[0] - 1
    joint, third = _exact_joint(model)
    for counts, probs in ((pairs, joint), (thirds, third)):
        ok, stat, critical = _chi_square_ok(counts, probs, n)
        assert ok, f"chi-square {stat:.1f} >= {critical:.1f}"
    assert 0 < kept < n  # both the accept and the reject branch were exercised
    if block_size == 2:
        assert len(calls) >= n  # every run drafted from an unread verify at least once


def test_speculative_accept_preserves_target_distribution():
    rng = np.random.default_rng(0)
    vocab, n_drafts, n = 6, 3, 4000
    p = rng.dirichlet(np.ones(vocab), size=n_drafts + 1).astype(np.float32)
    q = rng.dirichlet(np.ones(vocab), size=n_drafts).astype(np.float32)
    target_probs, draft_probs = mx.array(p), mx.array(q)
    mx.random.seed(7)
    first = Counter()
    for _ in range(n):
        drafts = [int(rng.choice(vocab, p=q[i] / q[i].sum())) for i in range(n_drafts)]
        num_kept, bonus = speculative_accept(drafts, target_probs, draft_probs)
        emitted = [*drafts[:num_kept], bonus]
        first[emitted[0]] += 1
    ok, stat, critical = _chi_square_ok(first, {t: float(p[0, t]) for t in range(vocab)}, n)
    assert ok, f"chi-square {stat:.1f} >= {critical:.1f}"


@pytest.mark.parametrize("argmax_drafts", [False, True])
def test_speculative_outcome_preserves_target_distribution(argmax_drafts):
    """The device-side rule: the first emitted token is distributed as p[0], through
    both branches (a draft rejected, and every draft kept)."""
    rng = np.random.default_rng(1)
    vocab, n_drafts, n = 6, 3, 4000
    p = rng.dirichlet(np.ones(vocab), size=n_drafts + 1).astype(np.float32)
    q = rng.dirichlet(np.ones(vocab), size=n_drafts).astype(np.float32)
    target_probs = mx.array(p)
    draft_probs = None if argmax_drafts else mx.array(q)
    mx.random.seed(11)
    first, kept_all = Counter(), 0
    for _ in range(n):
        if argmax_drafts:
            drafts = [int(np.argmax(p[i])) for i in range(n_drafts)]  # often all kept
        else:
            drafts = [int(rng.choice(vocab, p=q[i] / q[i].sum())) for i in range(n_drafts)]
        num_kept, bonus = speculative_outcome(
            mx.array(drafts, dtype=mx.uint32), target_probs, draft_probs
        )
        kept = num_kept.item()
        emitted = [*drafts[:kept], bonus.item()]
        first[emitted[0]] += 1
        kept_all += kept == n_drafts
    ok, stat, critical = _chi_square_ok(first, {t: float(p[0, t]) for t in range(vocab)}, n)
    assert ok, f"chi-square {stat:.1f} >= {critical:.1f}"
    assert kept_all > 0  # the bonus-from-p branch ran too
