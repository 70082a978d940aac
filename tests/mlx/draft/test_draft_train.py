"""A small draft training run on a tiny target: the loss falls, τ rises, the folder loads."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from mlx.utils import tree_flatten

from omlx.draft.baseline import plain_generate
from omlx.draft.capture import TargetAdapter
from omlx.draft.loop import DFlashGenerator, DFlashParams
from omlx.draft.model import load_draft
from omlx.draft.random_init import random_draft
from omlx.draft.train.data import GenerationSettings, Sample, generate_replies
from omlx.draft.train.loop_eval import loop_acceptance
from omlx.draft.train.sizing import draft_config
from omlx.draft.train.trainer import TrainConfig, Trainer
from omlx.errors import InvalidRequest
from tests.mlx.draft.conftest import VOCAB, build_target

BLOCK = 8


def _prompts(n: int, seed: int = 0) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [[int(t) for t in rng.integers(0, VOCAB - 1, rng.integers(5, 12))] for _ in range(n)]


@pytest.fixture(scope="module")
def distilled():
    """A tiny qwen3 target and its own greedy replies to 24 random prompts."""
    target = build_target("qwen3")
    prompts = _prompts(24)
    replies = generate_replies(
        target, prompts, [], GenerationSettings(max_new_tokens=48, batch_size=8)
    )
    samples = [
        Sample(f"p{i}", "test", "train", True, tuple(p), tuple(r))
        for i, (p, r) in enumerate(zip(prompts, replies, strict=True))
    ]
    return target, prompts, samples


def _trainer(target, samples, out, **overrides) -> Trainer:
    cfg = TrainConfig(
        **{
            "steps": 120,
            "batch_size": 8,
            "anchors_per_seq": 16,
            "lr": 3e-3,
            "eval_every": 60,
            "eval_sequences": 16,
            "checkpoint_every": 0,
            "save_dtype": "float32",
            **overrides,
        }
    )
    shape = draft_config(target, num_layers=2, block_size=BLOCK)
    return Trainer(target, shape, samples, samples[:16], cfg, out)


def _decode(target, draft, prompts) -> tuple[list[int], bool]:
    """Every cycle's committed tokens over real DFlash runs, and whether they equal plain."""
    generator = DFlashGenerator.from_models(target, draft)
    lengths, identical = [], True
    for prompt in prompts:
        run = generator.generate(prompt, DFlashParams(max_tokens=40))
        tokens = run.run()
        lengths += run.stats.acceptance_lengths
        identical &= tokens == plain_generate(target, prompt, DFlashParams(max_tokens=40)).tokens
    return lengths, identical


def _mean_tau(target, draft, prompts) -> tuple[float, bool]:
    lengths, identical = _decode(target, draft, prompts)
    return sum(lengths) / len(lengths), identical


# On greedy replies both label kinds are the target's picks (greedy ones recomputed).
# vocab_loss: the softmax over the draft vocabulary (the replies use few of the 256 ids).
# soft: greedy labels with the target's top tokens as the loss's target (its hard
# labels under a draft vocabulary are test_draft_train_objective's).
# ~24 s each on 2 cores: greedy labels stay in the quick tier, the other two are slow.
@pytest.mark.parametrize(
    ("labels", "vocab_loss"),
    [
        pytest.param("reply", False, marks=pytest.mark.slow),
        ("greedy", False),
        pytest.param("soft", True, marks=pytest.mark.slow),
    ],
)
def test_training_lowers_loss_and_raises_tau(distilled, tmp_path, labels, vocab_loss):
    target, prompts, samples = distilled
    assert all(len(s.reply_ids) == 48 for s in samples)  # no EOS given: full replies
    trainer = _trainer(target, samples, tmp_path / "draft", labels=labels, vocab_loss=vocab_loss)
    assert (trainer._vocab_loss is not None) == vocab_loss
    result = trainer.run()
    evals = [r for r in trainer.state.history if r["kind"] == "eval"]
    first, last = evals[0], evals[-1]
    assert last["eval_loss"] < first["eval_loss"] - 1.0
    assert last["eval_tau"] > first["eval_tau"] + 0.5
    assert result["steps"] == 120
    best = max(r["eval_tau"] for r in evals[1:])
    assert result["saved"]["eval_tau"] == best  # keep_best: the folder holds the best

    # The folder loads as any draft does, and the decoding loop accepts more of it.
    loaded = load_draft(tmp_path / "draft")
    assert loaded.config == trainer.draft_cfg
    for (name, a), (_, b) in zip(
        tree_flatten(trainer.draft.parameters()), tree_flatten(loaded.parameters()), strict=True
    ):
        np.testing.assert_array_equal(np.array(a), np.array(b), err_msg=name)
    trained_tau, identical = _mean_tau(target, loaded, prompts[:6])
    random_tau, _ = _mean_tau(target, random_draft(loaded.config, seed=5), prompts[:6])
    assert identical
    assert trained_tau > random_tau + 0.5, (trained_tau, random_tau)


def test_walked_tau_is_what_decoding_gets(distilled, tmp_path):
    """The held-out τ the trainer reports walks the chain as the loop does: the same
    cycles, cycle for cycle, as real DFlash runs of the same prompts."""
    target, prompts, samples = distilled
    trainer = _trainer(target, samples, tmp_path / "draft", steps=60, eval_every=1000)
    trainer.run()
    draft = load_draft(tmp_path / "draft")
    lengths, identical = _decode(target, draft, prompts[:6])
    assert identical
    chains = [  # what max_tokens=40 decodes: the first 40 tokens of each greedy reply
        Sample(s.prompt_id, s.category, s.split, True, s.prompt_ids, s.reply_ids[:40])
        for s in samples[:6]
    ]
    walked = loop_acceptance(
        draft,
        TargetAdapter(target, draft.config.target_layer_ids),
        chains,
        block_size=BLOCK,
        mask_token_id=draft.config.mask_token_id,
    )
    assert walked.tokens == sum(lengths) == 6 * 39
    assert walked.cycles == len(lengths)
    assert 1.0 < walked.tau < BLOCK  # a partly trained draft: some drafts kept, not all


def test_resume_continues_the_same_run(distilled, tmp_path):
    target, _, samples = distilled
    out = tmp_path / "draft"
    first = _trainer(target, samples, out, steps=4, checkpoint_every=2, eval_every=100)
    first.run()
    resumed = _trainer(target, samples, out, steps=6, checkpoint_every=2, eval_every=100)
    assert resumed.resume()
    assert resumed.state.step == 4
    for (name, a), (_, b) in zip(
        tree_flatten(first.draft.parameters()),
        tree_flatten(resumed.draft.parameters()),
        strict=True,
    ):
        np.testing.assert_array_equal(np.array(a), np.array(b), err_msg=name)
    assert int(resumed.optimizer.state["step"].item()) == 4
    assert resumed.run()["steps"] == 6


def test_resume_refuses_another_shape(distilled, tmp_path):
    target, _, samples = distilled
    _trainer(target, samples, tmp_path, steps=1, checkpoint_every=1, eval_every=100).run()
    other = Trainer(
        target,
        draft_config(target, num_layers=1, block_size=BLOCK),
        samples,
        samples[:4],
        TrainConfig(steps=1),
        tmp_path,
    )
    with pytest.raises(Exception, match="another draft shape"):
        other.resume()


def test_a_trained_draft_continues_where_it_stopped(distilled, tmp_path):
    """--init-from: the next run starts from the saved weights (its step-0 evaluation is
    the first run's last) with a fresh optimizer, and trains further."""
    target, _, samples = distilled
    first = _trainer(target, samples, tmp_path / "a", steps=40, eval_every=1000, keep_best=False)
    first_result = first.run()
    cont = _trainer(target, samples, tmp_path / "b", steps=40, init_from=str(tmp_path / "a"))
    for (name, a), (_, b) in zip(
        tree_flatten(first.draft.parameters()), tree_flatten(cont.draft.parameters()), strict=True
    ):
        np.testing.assert_array_equal(np.array(a), np.array(b), err_msg=name)
    assert int(cont.optimizer.state["step"].item()) == 0  # a fresh optimizer
    result = cont.run()
    start = result["first"]
    assert start["eval_loss"] == pytest.approx(first_result["final"]["eval_loss"], rel=1e-5)
    assert start["eval_tau"] == first_result["final"]["eval_tau"]
    assert result["final"]["eval_loss"] < start["eval_loss"] - 0.2


def test_a_draft_starts_from_one_place():
    with pytest.raises(InvalidRequest, match="not both"):
        TrainConfig(init_from="somewhere", init_from_target=True).check()


def test_unknown_labels_are_refused():
    with pytest.raises(InvalidRequest, match="labels"):
        TrainConfig(labels="teacher").check()


def test_greedy_labels_run_the_target_head_once_per_sequence(distilled, tmp_path, monkeypatch):
    """The target's argmax along a sequence is computed in its first epoch and reused:
    later epochs relabel from the cache exactly as a fresh computation would."""
    import omlx.draft.train.trainer as trainer_module
    from omlx.draft.train.objective import greedy_relabel, target_context_and_greedy

    target, _, samples = distilled
    trainer = _trainer(target, samples, tmp_path / "d", labels="greedy", steps=9)
    calls = []
    real = trainer_module.target_context_and_greedy

    def counted(adapter, tokens, chunk=8):
        calls.append(tokens.shape[0])
        return real(adapter, tokens, chunk)

    monkeypatch.setattr(trainer_module, "target_context_and_greedy", counted)
    for step in range(9):  # 24 samples in batches of 8: three epochs
        batch = trainer._batch(trainer._next_samples(), trainer.rng)
        hidden, got = trainer._target_outputs(batch)
        _, fresh = target_context_and_greedy(trainer.adapter, batch.tokens)
        want = greedy_relabel(batch, fresh)
        assert np.array_equal(np.array(got.labels), np.array(want.labels)), step
        assert np.array_equal(np.array(got.valid), np.array(want.valid)), step
        assert hidden.shape[:2] == batch.tokens.shape
    assert calls == [8, 8, 8]  # the first epoch only


def test_soft_labels_run_the_target_head_once_per_sequence(distilled, tmp_path, monkeypatch):
    """The target's top tokens are cached with its picks in a sequence's first epoch;
    later epochs relabel as a fresh computation does (probabilities kept in float16)."""
    import omlx.draft.train.trainer as trainer_module
    from omlx.draft.train.objective import SOFT_TOP_K, soft_relabel

    target, _, samples = distilled
    trainer = _trainer(target, samples, tmp_path / "d", labels="soft", steps=9)
    calls = []
    real = trainer_module.target_context_and_tops
    monkeypatch.setattr(
        trainer_module,
        "target_context_and_tops",
        lambda adapter, tokens: calls.append(tokens.shape[0]) or real(adapter, tokens),
    )
    for step in range(6):  # 24 samples in batches of 8: two epochs
        batch = trainer._batch(trainer._next_samples(), trainer.rng)
        _, got = trainer._target_outputs(batch)
        want = soft_relabel(batch, *real(trainer.adapter, batch.tokens)[1:])
        assert got.soft_ids.shape == (*batch.labels.shape, SOFT_TOP_K)
        assert np.array_equal(np.array(got.labels), np.array(want.labels)), step
        assert np.array_equal(np.array(got.valid), np.array(want.valid)), step
        valid = np.array(want.valid) > 0
        assert np.array_equal(np.array(got.soft_ids)[valid], np.array(want.soft_ids)[valid])
        np.testing.assert_allclose(
            np.array(got.soft_probs)[valid], np.array(want.soft_probs)[valid], atol=1e-3
        )
        loss, _, tau = trainer._loss(got, trainer._target_outputs(batch)[0])
        assert np.isfinite(loss.item()) and tau.item() >= 1.0
    assert calls == [8, 8, 8]  # the first epoch only


@pytest.mark.parametrize("labels", ["reply", "greedy", "soft"])
def test_cached_target_states_give_the_same_loss(distilled, tmp_path, monkeypatch, labels):
    """With cache_context the target runs in the first epoch only; the cached states,
    zero-padded to each later batch's width, give the loss a fresh forward gives."""
    import omlx.draft.train.trainer as trainer_module
    from omlx.draft.train.objective import block_loss, target_context

    target, _, samples = distilled
    trainer = _trainer(target, samples, tmp_path / "d", labels=labels, cache_context=True)
    forwards = []
    for name in ("target_context", "target_context_and_greedy", "target_context_and_tops"):
        real = getattr(trainer_module, name)

        def counted(adapter, tokens, *args, _real=real, **kwargs):
            forwards.append(tokens.shape[0])
            return _real(adapter, tokens, *args, **kwargs)

        monkeypatch.setattr(trainer_module, name, counted)
    for step in range(6):  # 24 samples in batches of 8: two epochs
        batch = trainer._batch(trainer._next_samples(), trainer.rng)
        hidden, batch = trainer._target_outputs(batch)
        fresh = target_context(trainer.adapter, batch.tokens)
        got = block_loss(trainer.draft, trainer.adapter, batch, hidden, trainer.weights)
        want = block_loss(trainer.draft, trainer.adapter, batch, fresh, trainer.weights)
        assert abs(got.loss.item() - want.loss.item()) < 1e-5, step
        assert got.tau.item() == want.tau.item(), step
    assert forwards == [8, 8, 8]  # the first epoch only
    assert len(trainer._contexts) == 24


def test_states_cached_in_bfloat16_take_half_the_memory_and_give_nearly_the_loss(
    distilled, tmp_path
):
    from omlx.draft.train.objective import block_loss, target_context

    target, _, samples = distilled
    trainer = _trainer(target, samples, tmp_path / "d", cache_context=True, cache_dtype="bfloat16")
    for step in range(6):  # two epochs: the second reads the cache
        batch = trainer._batch(trainer._next_samples(), trainer.rng)
        hidden, batch = trainer._target_outputs(batch)
        fresh = target_context(trainer.adapter, batch.tokens)
        got = block_loss(trainer.draft, trainer.adapter, batch, hidden, trainer.weights)
        want = block_loss(trainer.draft, trainer.adapter, batch, fresh, trainer.weights)
        assert abs(got.loss.item() - want.loss.item()) < 1e-2 * want.loss.item(), step
    assert {c.dtype for c in trainer._contexts.values()} == {mx.bfloat16}
    assert hidden.dtype == mx.bfloat16  # this batch came from the cache


def test_grouped_joins_give_the_same_greedy_replies(monkeypatch):
    """`join_rows`: prompts join in groups once that many rows are free (one prefill for
    the group), and greedy replies are the ones one-at-a-time joins give."""
    from collections import Counter

    from omlx.mlx_lm_compat.batch_join import FusedJoinBatchGenerator

    target = build_target("qwen3")
    prompts = _prompts(24, seed=3)
    free_run = generate_replies(target, prompts, [], GenerationSettings(max_new_tokens=24))
    # An "EOS" the model writes now and then, so replies end at different steps.
    counts = Counter(t for r in free_run for t in set(r))
    eos = min(counts, key=lambda t: abs(counts[t] - len(prompts) // 2))
    settings = GenerationSettings(max_new_tokens=24, batch_size=8)
    one_by_one = generate_replies(target, prompts, [eos], settings)
    assert len({len(r) for r in one_by_one}) > 3  # replies of many lengths

    sizes: list[int] = []
    insert = FusedJoinBatchGenerator.insert

    def spy(self, batch, *args, **kwargs):
        sizes.append(len(batch))
        return insert(self, batch, *args, **kwargs)

    monkeypatch.setattr(FusedJoinBatchGenerator, "insert", spy)
    grouped = generate_replies(
        target, prompts, [eos], GenerationSettings(max_new_tokens=24, batch_size=8, join_rows=4)
    )
    assert grouped == one_by_one
    assert sizes[0] == 8 and sum(sizes) == 24 and len(sizes) > 2
    assert all(n >= 4 for n in sizes[1:-1]), sizes


def test_join_rows_names_the_data_only_when_set():
    from omlx.draft.train.data import cache_key

    base = GenerationSettings()
    assert cache_key("t", [[1, 2]], base) == cache_key(
        "t", [[1, 2]], GenerationSettings(join_rows=1)
    )
    assert cache_key("t", [[1, 2]], base) != cache_key(
        "t", [[1, 2]], GenerationSettings(join_rows=8)
    )


def test_a_wall_budget_ends_the_run_early_and_still_saves(distilled, tmp_path):
    """--wall-budget: a run whose schedule would take far longer stops once its wall time
    is spent, then evaluates and saves a loadable draft, and says why it stopped."""
    target, _, samples = distilled
    out = tmp_path / "draft"
    result = _trainer(target, samples, out, steps=1_000_000, wall_budget_s=1.5).run()
    assert result["stopped_by"] == "wall_budget"
    assert 0 < result["steps"] < 1_000_000
    assert result["final"]["step"] == result["steps"]
    assert load_draft(out).config.block_size == BLOCK
    done = _trainer(target, samples, tmp_path / "full", steps=3, wall_budget_s=600).run()
    assert done["stopped_by"] == "schedule" and done["steps"] == 3


def test_a_wall_budget_must_be_positive():
    with pytest.raises(InvalidRequest, match="wall-clock budget"):
        TrainConfig(wall_budget_s=0).check()
