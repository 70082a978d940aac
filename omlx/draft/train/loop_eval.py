"""The acceptance length greedy DFlash would reach on held-out chains, cycle by cycle.

Scoring blocks at uniformly drawn anchors overstates it: a long easy stretch counts at
every anchor inside it, yet decoding crosses it in a few cycles, while every miss in a
hard stretch costs a whole cycle. This walks each held-out reply (the target's own
greedy chain) as the loop does: the first reply token comes from the prefill, each
cycle drafts a block at the last committed token, keeps the drafted prefix that
matches the chain plus the target's bonus token, and the next block starts after
them. τ is the committed tokens over the cycles, the figure `DFlashStats` reports for
a real run on the same chains. All chains advance together, one batched draft pass
per cycle.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import mlx.core as mx
import numpy as np

from omlx.draft.capture import TargetAdapter
from omlx.draft.model import DFlashDraftModel
from omlx.draft.train.data import Sample
from omlx.draft.train.objective import PAD_MULTIPLE, block_hidden, target_context


@dataclass(slots=True)
class LoopAcceptance:
    tokens: int  # tokens committed by cycles (the prefill's first token excluded)
    cycles: int

    @property
    def tau(self) -> float:
        return self.tokens / self.cycles if self.cycles else 0.0


def loop_acceptance(
    draft: DFlashDraftModel,
    target: TargetAdapter,
    samples: Sequence[Sample],
    *,
    block_size: int,
    mask_token_id: int,
    max_len: int | None = None,
    head: Callable[[mx.array], mx.array] | None = None,
) -> LoopAcceptance:
    """`head`: the drafter's (its vocabulary's RestrictedHead); default the target's."""
    seqs = [list(s.prompt_ids) + list(s.reply_ids) for s in samples]
    if max_len is not None:
        seqs = [seq[:max_len] for seq in seqs]
    lengths = np.array([len(seq) for seq in seqs])
    width = -(-int(lengths.max()) // PAD_MULTIPLE) * PAD_MULTIPLE
    tokens = np.zeros((len(seqs), width), np.int32)
    for i, seq in enumerate(seqs):
        tokens[i, : len(seq)] = seq
    dtype = draft.fc.weight.dtype
    hidden = target_context(target, mx.array(tokens)).astype(dtype)
    # The block at position p predicts p+1..p+B-1; the prefill committed the first reply
    # token, so the first block sits on it.
    pos = np.minimum([len(s.prompt_ids) for s in samples], lengths - 1)
    offsets = np.arange(1, block_size)[None, :]
    total = cycles = 0
    while True:
        remaining = lengths - 1 - pos
        active = remaining > 0
        if not active.any():
            break
        anchors = np.minimum(pos, width - 1)
        block = np.full((len(seqs), block_size), mask_token_id, np.int32)
        block[:, 0] = tokens[np.arange(len(seqs)), anchors]
        emb = target.embed(mx.array(block))[:, None]
        out = block_hidden(draft, emb.astype(dtype), hidden, mx.array(anchors[:, None]))
        logits = (head or target.lm_head)(out[:, 1:].astype(emb.dtype))
        drafted = np.array(mx.argmax(logits, axis=-1))
        labels = np.take_along_axis(tokens, np.minimum(anchors[:, None] + offsets, width - 1), 1)
        hit = (drafted == labels) & (anchors[:, None] + offsets < lengths[:, None])
        kept = np.cumprod(hit, axis=1).sum(axis=1)
        step = np.minimum(kept + 1, remaining)
        total += int(step[active].sum())
        cycles += int(active.sum())
        pos = np.where(active, pos + kept + 1, pos)
    return LoopAcceptance(total, cycles)
