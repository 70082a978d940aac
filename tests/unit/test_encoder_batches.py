"""Encoder inputs grouped into forward passes: by length, at most so many rows and tokens."""

from __future__ import annotations

import random

from omlx.workers.encoder_batches import batches, by_length


def test_rows_alone_cap_a_batch_without_a_token_cap():
    lengths = [5, 1, 3, 2, 4]
    order = by_length(lengths)
    assert order == [1, 3, 2, 4, 0]
    assert list(batches(lengths, order, 2, None)) == [[1, 3], [2, 4], [0]]


def test_padded_tokens_cap_a_batch():
    lengths = [100, 10, 10, 10, 40, 40, 300]
    got = list(batches(lengths, by_length(lengths), 32, 100))
    # 3 x 10 fit; 40 joins only alone with one other 40 (2 x 40 = 80); 100 and 300 go alone
    assert got == [[1, 2, 3], [4, 5], [0], [6]]
    for rows in got:
        assert len(rows) == 1 or len(rows) * max(lengths[i] for i in rows) <= 100


def test_every_input_once_in_length_order():
    rng = random.Random(3)
    lengths = [rng.randint(1, 512) for _ in range(300)]
    order = by_length(lengths)
    got = list(batches(lengths, order, 32, 2048))
    flat = [i for rows in got for i in rows]
    assert flat == order
    assert all(1 <= len(rows) <= 32 for rows in got)
    assert all(len(rows) * max(lengths[i] for i in rows) <= 2048 for rows in got)
    assert len(got) < len(lengths)  # short inputs share a pass
