"""Draft vocabularies: the head over a subset equals the full head there, decoding stays
lossless, and the file round-trips through the loader."""

from __future__ import annotations

import json

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest

from omlx.draft.baseline import plain_generate
from omlx.draft.capture import TargetAdapter
from omlx.draft.loop import DFlashGenerator, DFlashParams
from omlx.draft.model import load_draft
from omlx.draft.random_init import random_draft, save_draft
from omlx.draft.train.sizing import draft_config
from omlx.draft.vocab import (
    ROUND_TO,
    VOCAB_FILE,
    DraftVocab,
    RestrictedHead,
    choose_vocab,
    read_vocab,
    write_vocab,
)
from omlx.errors import InvalidRequest
from tests.mlx.draft.conftest import VOCAB, build_target


def test_choose_vocab_covers_the_share_and_rounds_up():
    # Token t appears 1000 - t times: the head of the ranking carries most of the mass.
    replies = [[t] * (1000 - t) for t in range(1000)]
    total = sum(1000 - t for t in range(1000))
    ids = choose_vocab(replies, 0.5)
    assert len(ids) % ROUND_TO == 0 and ids == sorted(ids)
    assert ids == list(range(len(ids)))  # the most frequent ones
    needed = next(k for k in range(1, 1001) if sum(1000 - t for t in range(k)) >= total / 2)
    assert needed <= len(ids) < needed + ROUND_TO
    assert choose_vocab(replies, 1.0) == list(range(1000))  # all of them, not rounded past
    assert choose_vocab([[5, 5, 9]], 0.99) == [5, 9]


@pytest.mark.parametrize("arch,quantized", [("llama", False), ("qwen3", False), ("qwen3", True)])
def test_restricted_head_is_the_full_head_on_its_rows(arch, quantized):
    target = build_target(arch)
    if quantized:  # a quantized tied embedding: packed rows are gathered as they are
        nn.quantize(target, group_size=32, bits=4)
    adapter = TargetAdapter(target, [1])
    ids = [0, 3, 17, 200, VOCAB - 1]
    head = RestrictedHead(adapter.head_module, ids, adapter.vocab_size)
    hidden = mx.random.normal((2, 3, adapter.hidden_size))
    full = np.array(adapter.lm_head(hidden))
    got = np.array(head(hidden))
    assert got.shape == full.shape
    np.testing.assert_allclose(got[..., ids], full[..., ids], rtol=1e-5, atol=1e-5)
    others = np.setdiff1d(np.arange(VOCAB), ids)
    assert np.isneginf(got[..., others]).all()


def test_restricted_vocab_must_fit_the_target():
    adapter = TargetAdapter(build_target("llama"), [1])
    with pytest.raises(InvalidRequest, match="past the target"):
        RestrictedHead(adapter.head_module, [1, VOCAB], adapter.vocab_size)


def test_decoding_with_a_draft_vocabulary_stays_lossless(tmp_path):
    target = build_target("qwen3")
    cfg = draft_config(target, num_layers=1, block_size=6)
    save_draft(random_draft(cfg, seed=2), tmp_path)
    write_vocab(tmp_path, list(range(0, VOCAB, 3)), 0.9)  # a third of the tokens
    draft = load_draft(tmp_path)
    assert draft.vocab == DraftVocab(tuple(range(0, VOCAB, 3)))
    generator = DFlashGenerator.from_models(target, draft)
    rng = np.random.default_rng(0)
    for _ in range(3):
        prompt = [int(t) for t in rng.integers(0, VOCAB - 1, 9)]
        params = DFlashParams(max_tokens=24)
        run = generator.generate(prompt, params)
        assert run.run() == plain_generate(target, prompt, params).tokens
        # Proposals come from the vocabulary only.
        adapter = generator.target
        _, context, _ = adapter.forward(mx.array(prompt)[None], adapter.make_cache())
        generator.drafter.start()
        logits = generator.drafter.propose(prompt, context)
        assert logits.shape == (5, VOCAB)
        assert set(np.array(mx.argmax(logits, axis=-1)).tolist()) <= set(range(0, VOCAB, 3))


def test_vocab_file_round_trip_and_bad_files(tmp_path):
    assert read_vocab(tmp_path) is None
    write_vocab(tmp_path, [4, 8], 0.95)
    assert json.loads((tmp_path / VOCAB_FILE).read_text())["coverage"] == 0.95
    assert read_vocab(tmp_path) == DraftVocab((4, 8))
    (tmp_path / VOCAB_FILE).write_text('{"token_ids": [-1]}')
    with pytest.raises(InvalidRequest):
        read_vocab(tmp_path)
    (tmp_path / VOCAB_FILE).write_text("{not json")
    with pytest.raises(InvalidRequest):
        read_vocab(tmp_path)
