"""The training forward is the decoding forward: same hidden states for every block."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from omlx.draft.capture import TargetAdapter
from omlx.draft.random_init import random_draft
from omlx.draft.train.data import Sample
from omlx.draft.train.objective import (
    VocabLoss,
    block_hidden,
    block_loss,
    greedy_relabel,
    make_batch,
    position_weights,
    target_context_and_greedy,
)
from omlx.draft.train.sizing import default_num_layers, draft_config
from tests.mlx.draft.conftest import VOCAB, build_target


def _sample(prompt_len: int, reply_len: int, seed: int) -> Sample:
    rng = np.random.default_rng(seed)
    ids = [int(t) for t in rng.integers(0, VOCAB - 1, prompt_len + reply_len)]
    return Sample("p", "chat", "train", True, tuple(ids[:prompt_len]), tuple(ids[prompt_len:]))


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_block_hidden_matches_decoding_forward(arch):
    target = build_target(arch)
    cfg = draft_config(target, num_layers=2, block_size=6)
    draft = random_draft(cfg, seed=3)
    adapter = TargetAdapter(target, cfg.target_layer_ids)
    samples = [_sample(5, 20, 1), _sample(9, 7, 2)]  # unequal lengths: padding
    batch = make_batch(
        samples,
        block_size=6,
        anchors_per_seq=4,
        mask_token_id=cfg.mask_token_id,
        rng=np.random.default_rng(0),
    )
    _, hidden, _ = adapter.forward(batch.tokens, None, with_logits=False)
    emb = adapter.embed(batch.block_ids)
    trained = block_hidden(draft, emb, hidden, batch.anchors)  # [N*K, B, D]
    anchors = np.array(batch.anchors)
    for n in range(2):
        for k in range(4):
            s = int(anchors[n, k])
            cache = draft.make_cache()
            ref = draft(emb[n : n + 1, k], hidden[n : n + 1, :s], cache)[0]
            np.testing.assert_allclose(
                np.array(trained[n * 4 + k]), np.array(ref), rtol=1e-4, atol=1e-4
            )


def test_batch_labels_and_validity():
    sample = _sample(4, 6, 0)
    seq = list(sample.prompt_ids) + list(sample.reply_ids)
    batch = make_batch(
        [sample],
        block_size=5,
        anchors_per_seq=5,
        mask_token_id=VOCAB - 1,
        rng=np.random.default_rng(0),
    )
    anchors = np.array(batch.anchors)[0]
    assert sorted(anchors.tolist()) == list(range(4, 10 - 1))  # every reply anchor once
    for k, s in enumerate(anchors):
        block = np.array(batch.block_ids)[0, k]
        assert block[0] == seq[s] and (block[1:] == VOCAB - 1).all()
        valid = np.array(batch.valid)[0, k].astype(bool)
        labels = np.array(batch.labels)[0, k]
        expected = seq[s + 1 : s + 5]
        assert valid.sum() == len(expected)
        assert labels[valid].tolist() == expected


def test_weights_decay_and_perfect_draft_tau():
    w = np.array(position_weights(16, 7.0))
    assert w[0] == 1.0 and np.all(np.diff(w) < 0)
    target = build_target("llama")
    cfg = draft_config(target, num_layers=1, block_size=4)
    draft = random_draft(cfg, seed=0)
    adapter = TargetAdapter(target, cfg.target_layer_ids)
    batch = make_batch(
        [_sample(3, 12, 5)],
        block_size=4,
        anchors_per_seq=8,
        mask_token_id=cfg.mask_token_id,
        rng=np.random.default_rng(1),
    )
    _, hidden, _ = adapter.forward(batch.tokens, None, with_logits=False)
    m = block_loss(draft, adapter, batch, hidden, position_weights(4, 2.0))
    assert 1.0 <= float(m.tau.item()) < 1.5  # a random draft rarely hits a random label
    assert float(m.loss.item()) > 0


def test_default_depth_follows_the_target():
    assert default_num_layers(4) == 1
    assert default_num_layers(30) == 4
    assert default_num_layers(36) == 5
    assert default_num_layers(80) == 5


def test_greedy_relabel_keeps_labels_while_the_reply_follows_the_target():
    target = build_target("llama")
    cfg = draft_config(target, num_layers=1, block_size=5)
    adapter = TargetAdapter(target, cfg.target_layer_ids)
    prompt = [3, 17, 42, 99]
    # The target's own greedy chain, then the same with a token swapped at reply index 4.
    chain = list(prompt)
    for _ in range(10):
        logits = target(mx.array(chain)[None])[0, -1]
        chain.append(int(mx.argmax(logits).item()))
    off = list(chain)
    off[len(prompt) + 4] = (off[len(prompt) + 4] + 1) % VOCAB
    samples = [
        Sample("g", "chat", "train", True, tuple(prompt), tuple(chain[len(prompt) :])),
        Sample("s", "chat", "train", False, tuple(prompt), tuple(off[len(prompt) :])),
    ]
    batch = make_batch(
        samples,
        block_size=5,
        anchors_per_seq=6,
        mask_token_id=cfg.mask_token_id,
        rng=np.random.default_rng(0),
    )
    hidden, greedy_next = target_context_and_greedy(adapter, batch.tokens, chunk=1)
    _, want_hidden, _ = adapter.forward(batch.tokens, None, with_logits=False)
    # chunked and whole-batch forwards differ only by BLAS rounding
    np.testing.assert_allclose(np.array(hidden), np.array(want_hidden), rtol=1e-4, atol=1e-3)
    relabelled = greedy_relabel(batch, greedy_next)
    anchors = np.array(batch.anchors)
    labels, valid = np.array(relabelled.labels), np.array(relabelled.valid).astype(bool)
    # The greedy reply: nothing changes.
    np.testing.assert_array_equal(labels[0], np.array(batch.labels)[0])
    np.testing.assert_array_equal(valid[0], np.array(batch.valid)[0].astype(bool))
    # The reply that left the chain at `swapped` (and the tokens after it, the old
    # chain's, need not be the target's picks either): labels are the target's picks
    # after the actual tokens, valid while every token between anchor and label was.
    seq = off

    def pick(pos: int) -> int:
        return int(mx.argmax(target(mx.array(seq[:pos])[None])[0, -1]).item())

    followed = {t: seq[t] == pick(t) for t in range(len(prompt), len(seq))}
    assert not followed[len(prompt) + 4]
    for k, s in enumerate(anchors[1]):
        for j in range(4):  # block position j + 1 predicts seq[s + j + 1]
            pos = s + j + 1
            want = pos < len(seq) and all(followed[t] for t in range(s + 1, pos))
            assert valid[1, k, j] == want
            if want:
                assert labels[1, k, j] == pick(pos)
    assert valid[1].sum() < np.array(batch.valid)[1].sum()  # some labels were dropped


def _loss_case(block_size: int = 4):
    target = build_target("llama")
    cfg = draft_config(target, num_layers=1, block_size=block_size)
    draft = random_draft(cfg, seed=0)
    adapter = TargetAdapter(target, cfg.target_layer_ids)
    batch = make_batch(
        [_sample(3, 12, 5), _sample(4, 9, 6)],
        block_size=block_size,
        anchors_per_seq=6,
        mask_token_id=cfg.mask_token_id,
        rng=np.random.default_rng(1),
    )
    _, hidden, _ = adapter.forward(batch.tokens, None, with_logits=False)
    return draft, adapter, batch, hidden, position_weights(block_size, 2.0)


def test_a_vocabulary_of_every_token_gives_the_full_loss():
    draft, adapter, batch, hidden, w = _loss_case()
    full = block_loss(draft, adapter, batch, hidden, w)
    every = VocabLoss.build(adapter, list(range(adapter.vocab_size)))
    got = block_loss(draft, adapter, batch, hidden, w, every)
    np.testing.assert_allclose(float(got.loss.item()), float(full.loss.item()), rtol=1e-5)
    np.testing.assert_allclose(np.array(got.accuracy), np.array(full.accuracy), atol=1e-6)
    assert float(got.tau.item()) == pytest.approx(float(full.tau.item()))


def test_the_vocabulary_loss_is_a_softmax_over_its_tokens_without_outside_labels():
    draft, adapter, batch, hidden, w = _loss_case()
    labels = np.array(batch.labels)
    valid = np.array(batch.valid).astype(bool)
    used = sorted(set(labels[valid].tolist()))
    left_out = used[: len(used) // 3]  # labels no draft of this vocabulary can win
    ids = [t for t in range(adapter.vocab_size) if t not in set(left_out)]
    vocab = VocabLoss.build(adapter, ids)
    got = block_loss(draft, adapter, batch, hidden, w, vocab)

    # The same by hand: full logits, restricted to `ids`, outside labels dropped.
    emb = adapter.embed(batch.block_ids)
    out = block_hidden(draft, emb, hidden, batch.anchors)
    logits = np.array(adapter.lm_head(out[:, 1:]).astype(mx.float32))[..., ids]
    n, k, b1 = labels.shape
    flat_labels, flat_valid = labels.reshape(n * k, b1), valid.reshape(n * k, b1)
    position = {t: i for i, t in enumerate(ids)}
    total = weight = 0.0
    weights = np.array(w)
    for row in range(n * k):
        for j in range(b1):
            label = int(flat_labels[row, j])
            if not flat_valid[row, j] or label not in position:
                continue
            z = logits[row, j].astype(np.float64)
            ce = np.log(np.exp(z - z.max()).sum()) + z.max() - z[position[label]]
            total += weights[j] * ce
            weight += weights[j]
    assert weight > 0
    np.testing.assert_allclose(float(got.loss.item()), total / weight, rtol=1e-4)


def _with_soft(batch, ids: np.ndarray, probs: np.ndarray):
    from omlx.draft.train.objective import BlockBatch

    return BlockBatch(
        batch.tokens, batch.anchors, batch.block_ids, batch.labels, batch.valid,
        soft_ids=mx.array(ids.astype(np.int32)), soft_probs=mx.array(probs.astype(np.float32)),
    )  # fmt: skip


@pytest.mark.parametrize("restricted", [False, True])
def test_soft_labels_all_on_the_label_are_the_hard_loss(restricted):
    draft, adapter, batch, hidden, w = _loss_case()
    labels = np.array(batch.labels)
    vocab = None
    if restricted:  # the hard labels under a draft vocabulary, some left out
        valid = np.array(batch.valid).astype(bool)
        left_out = set(sorted(set(labels[valid].tolist()))[:3])
        vocab = VocabLoss.build(
            adapter, [t for t in range(adapter.vocab_size) if t not in left_out]
        )
    hard = block_loss(draft, adapter, batch, hidden, w, vocab)
    # The label first with all the mass, then other tokens with none.
    ids = np.stack([labels, (labels + 1) % VOCAB, (labels + 2) % VOCAB], axis=-1)
    probs = np.zeros(ids.shape)
    probs[..., 0] = 1.0
    soft = block_loss(draft, adapter, _with_soft(batch, ids, probs), hidden, w, vocab)
    np.testing.assert_allclose(float(soft.loss.item()), float(hard.loss.item()), rtol=1e-5)
    assert float(soft.tau.item()) == pytest.approx(float(hard.tau.item()))


def test_soft_labels_are_the_cross_entropy_against_the_target_top_tokens():
    from omlx.draft.train.objective import SOFT_SHARE

    draft, adapter, batch, hidden, w = _loss_case()
    labels = np.array(batch.labels)
    ids = np.stack([labels, (labels + 7) % VOCAB], axis=-1)
    probs = np.stack([np.full(labels.shape, 0.6), np.full(labels.shape, 0.2)], axis=-1)
    got = block_loss(draft, adapter, _with_soft(batch, ids, probs), hidden, w)
    emb = adapter.embed(batch.block_ids)
    out = block_hidden(draft, emb, hidden, batch.anchors)
    logits = np.array(adapter.lm_head(out[:, 1:]).astype(mx.float32)).astype(np.float64)
    n, k, b1 = labels.shape
    logits = logits.reshape(n, k, b1, -1)
    lse = np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1)) + logits.max(-1)
    q = probs / probs.sum(-1, keepdims=True)  # renormalised over the kept tokens: 3/4, 1/4
    soft = (np.take_along_axis(logits, ids, axis=-1) * q).sum(-1)
    hard = np.take_along_axis(logits, labels[..., None], axis=-1)[..., 0]
    ce = lse - (SOFT_SHARE * soft + (1 - SOFT_SHARE) * hard)  # half the argmax, half q
    weights = np.array(w)[None, None, :] * np.array(batch.valid)
    np.testing.assert_allclose(
        float(got.loss.item()), (ce * weights).sum() / weights.sum(), rtol=1e-4
    )


def test_the_target_top_tokens_come_likeliest_first_after_each_position():
    from omlx.draft.train.objective import target_context_and_tops

    target = build_target("llama")
    cfg = draft_config(target, num_layers=1, block_size=4)
    adapter = TargetAdapter(target, cfg.target_layer_ids)
    tokens = mx.array([[3, 17, 42, 99, 5, 8], [7, 7, 1, 2, 0, 0]])
    hidden, greedy, ids, probs = target_context_and_tops(adapter, tokens, top=5, chunk=1)
    _, want_greedy = target_context_and_greedy(adapter, tokens, chunk=1)
    assert np.array_equal(np.array(greedy), np.array(want_greedy))
    full = np.array(mx.softmax(target(tokens).astype(mx.float32), axis=-1))
    want_ids = np.argsort(-full, axis=-1)[..., :5]
    assert np.array_equal(np.array(ids), want_ids)
    np.testing.assert_allclose(
        np.array(probs), np.take_along_axis(full, want_ids, axis=-1), rtol=1e-4, atol=1e-6
    )
    assert hidden.shape[:2] == tokens.shape
