"""The DFlash block objective: many draft blocks per sequence, predicted in one pass.

For a sequence x (prompt + the target's reply) with captured target states H, an anchor
s picks a block exactly as decoding would see it: block = [x_s, MASK × (B - 1)] at
positions s..s+B-1, context = H[0..s-1], and the draft must put x_{s+k} at block
position k. All anchors of all sequences of a batch run in one forward pass: each
block's queries attend to its own context prefix (a mask on the shared context keys)
and to its own block, without a causal mask, as in `DraftAttention` at decode time.
The loss is cross-entropy at every block position k >= 1, weighted by
w_k = exp(-(k - 1) / gamma): an early miss ends the accepted run, so early positions
count most (the DFlash paper's weighting).

With soft labels (`soft_relabel`) position k's target is half the target's argmax and
half its own distribution after the block's prefix, cut to its `SOFT_TOP_K` likeliest
tokens: a draft trained on few prompts overfits hard labels (SmolLM2, runs 6-7), and
the rest of the target's distribution says which near-misses are near.

With a draft vocabulary (`VocabLoss`), the softmax runs over those tokens only, the
ones the drafter can ever propose (omlx.draft.vocab): what decoding's argmax chooses
among, at a fraction of the full head's cost. A label outside it is a position no
draft can win, so it leaves the loss.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import mlx.core as mx
import numpy as np

from omlx.draft.capture import TargetAdapter
from omlx.draft.model import DFlashDraftModel, DraftAttention
from omlx.draft.train.data import Sample
from omlx.draft.vocab import RestrictedHead

PAD_MULTIPLE = 32
# The target's distribution is kept as its top tokens. On 10 carried SmolLM2 replies
# (1,623 positions, benchmarks/target_top_mass.py) its top 8 held 89 % of the probability
# on average (median 96 %), and 77 % where its top token held under half (36 % of the
# positions); 8 x (int32 + float16) a token is what caching it for every training
# sequence affords (~150 MB for 3M tokens).
SOFT_TOP_K = 8
# The soft target is this share of the target's distribution and the rest its argmax:
# greedy decoding accepts argmaxes, and where the target is unsure (flat over its top
# tokens) a target of its distribution alone barely teaches which one (on a tiny random
# target its training test reached τ 1.41, short of the 1.5 asked; half and half passes).
SOFT_SHARE = 0.5


def default_gamma(block_size: int) -> float:
    """The paper's decay per block size (7 for 16, 5 for 10, 4 for 8)."""
    return {16: 7.0, 10: 5.0, 8: 4.0}.get(block_size, max(1.0, block_size / 2))


def position_weights(block_size: int, gamma: float) -> mx.array:
    """w_k for block positions k = 1..block_size-1."""
    return mx.array([math.exp(-(k - 1) / gamma) for k in range(1, block_size)])


@dataclass(slots=True)
class BlockBatch:
    tokens: mx.array  # [N, L] int32, right-padded
    anchors: mx.array  # [N, K] int32: block start positions
    block_ids: mx.array  # [N, K, B] int32: [x_s, MASK, ...]
    labels: mx.array  # [N, K, B-1] int32: x_{s+1..s+B-1}
    valid: mx.array  # [N, K, B-1] float32: 1 where the label lies inside the sequence
    # Soft labels: the target's top tokens after each label's prefix and their
    # probabilities (not renormalised), [N, K, B-1, top]; None: hard labels.
    soft_ids: mx.array | None = None
    soft_probs: mx.array | None = None

    @property
    def num_blocks(self) -> int:
        return int(self.anchors.size)


def make_batch(
    samples: Sequence[Sample],
    *,
    block_size: int,
    anchors_per_seq: int,
    mask_token_id: int,
    rng: np.random.Generator,
    max_len: int | None = None,
) -> BlockBatch:
    """Anchors drawn uniformly from each reply (without replacement when it is long
    enough); positions past a sequence's end are labelled invalid."""
    seqs = [list(s.prompt_ids) + list(s.reply_ids) for s in samples]
    if max_len is not None:
        seqs = [seq[:max_len] for seq in seqs]
    longest = max(len(seq) for seq in seqs)
    width = -(-longest // PAD_MULTIPLE) * PAD_MULTIPLE
    n, k, b = len(seqs), anchors_per_seq, block_size
    tokens = np.zeros((n, width), np.int32)
    anchors = np.zeros((n, k), np.int32)
    for i, (seq, sample) in enumerate(zip(seqs, samples, strict=True)):
        tokens[i, : len(seq)] = seq
        first = max(1, len(sample.prompt_ids))  # the first reply token opens block one
        last = len(seq) - 2  # at least one label after the anchor
        if last < first:
            first = last = max(1, len(seq) - 2)
        choices = np.arange(first, last + 1)
        anchors[i] = rng.choice(choices, size=k, replace=len(choices) < k)
    offsets = anchors[:, :, None] + np.arange(1, b)[None, None, :]
    lengths = np.array([len(seq) for seq in seqs])[:, None, None]
    valid = offsets < lengths
    labels = np.take_along_axis(
        tokens[:, None, :].repeat(k, axis=1), np.minimum(offsets, width - 1), axis=2
    )
    block_ids = np.full((n, k, b), mask_token_id, np.int32)
    block_ids[:, :, 0] = np.take_along_axis(tokens, anchors, axis=1)
    return BlockBatch(
        tokens=mx.array(tokens),
        anchors=mx.array(anchors),
        block_ids=mx.array(block_ids),
        labels=mx.array(np.where(valid, labels, 0).astype(np.int32)),
        valid=mx.array(valid.astype(np.float32)),
    )


def target_context(target: TargetAdapter, tokens: mx.array) -> mx.array:
    """The captured target states of every position, with no gradient: [N, L, C]."""
    _, hidden, _ = target.forward(tokens, None, with_logits=False)  # type: ignore[arg-type]
    return mx.stop_gradient(hidden)


def target_context_and_greedy(
    target: TargetAdapter, tokens: mx.array, chunk: int = 8
) -> tuple[mx.array, mx.array]:
    """The captured states [N, L, C] and the target's argmax after every position
    [N, L] (what it picks next), `chunk` sequences per forward pass, so only one
    chunk's [chunk, L, vocab] logits are alive at a time."""
    hidden, picks, _, _ = target_context_and_tops(target, tokens, top=0, chunk=chunk)
    return hidden, picks


def target_context_and_tops(
    target: TargetAdapter, tokens: mx.array, top: int = SOFT_TOP_K, chunk: int = 8
) -> tuple[mx.array, mx.array, mx.array | None, mx.array | None]:
    """As target_context_and_greedy, and (`top` > 0) the target's `top` likeliest next
    tokens after every position with their probabilities, likeliest first: [N, L, top]
    each (None with `top` 0)."""
    hiddens, picks, ids, probs = [], [], [], []
    for start in range(0, tokens.shape[0], chunk):
        logits, hidden, _ = target.forward(tokens[start : start + chunk], None)  # type: ignore[arg-type]
        assert logits is not None
        logits = logits.astype(mx.float32)
        picks.append(mx.argmax(logits, axis=-1).astype(mx.int32))
        hiddens.append(hidden)
        if top:
            best = mx.argpartition(-logits, kth=top - 1, axis=-1)[..., :top]
            p = mx.take_along_axis(mx.softmax(logits, axis=-1), best, axis=-1)
            order = mx.argsort(-p, axis=-1)
            ids.append(mx.take_along_axis(best, order, axis=-1).astype(mx.int32))
            probs.append(mx.take_along_axis(p, order, axis=-1))
        mx.eval(hidden, picks[-1], *ids[-1:], *probs[-1:])  # the chunk's logits freed here
    return (
        mx.stop_gradient(mx.concatenate(hiddens)),
        mx.concatenate(picks),
        mx.concatenate(ids) if top else None,
        mx.concatenate(probs) if top else None,
    )


def _at_label_positions(per_position: mx.array, anchors: mx.array, b1: int) -> mx.array:
    """[N, L, ...] values after each position -> [N, K, B-1, ...] at the labels' prefixes:
    label k of the block anchored at s is what follows position s + k - 1."""
    n, k = anchors.shape
    width = per_position.shape[1]
    positions = anchors[:, :, None] + mx.arange(b1)[None, None, :]
    positions = mx.minimum(positions, width - 1).reshape(n, k * b1)
    rest = per_position.shape[2:]
    index = positions.reshape(n, k * b1, *([1] * len(rest)))
    index = mx.broadcast_to(index, (n, k * b1, *rest))
    return mx.take_along_axis(per_position, index, axis=1).reshape(n, k, b1, *rest)


def soft_relabel(
    batch: BlockBatch, greedy_next: mx.array, top_ids: mx.array, top_probs: mx.array
) -> BlockBatch:
    """Greedy labels (greedy_relabel: valid while the reply followed the target), each
    with the target's top tokens and probabilities after the same prefix."""
    hard = greedy_relabel(batch, greedy_next)
    b1 = batch.labels.shape[2]
    hard.soft_ids = _at_label_positions(top_ids, batch.anchors, b1)
    hard.soft_probs = _at_label_positions(top_probs, batch.anchors, b1)
    return hard


def greedy_relabel(batch: BlockBatch, greedy_next: mx.array) -> BlockBatch:
    """Block labels from the target's own argmax, kept only while the reply followed it.

    Position k of the block anchored at s is relabelled g[s + k - 1] (the target's pick
    after x_{<s+k}) and stays valid only while x_{s+1..s+k-1} all equal the target's
    picks: the labels are then exactly the greedy chain from the anchor, which is what
    greedy DFlash must predict. A sampled reply keeps its varied context but stops
    teaching its sampled choices (on SmolLM2's T=0.7 replies, 23 % of tokens are not the
    argmax, and a run of agreement from a position lasts ~5.5 tokens); a greedy reply's
    labels stay as they are, up to the target's numerics.
    """
    n, k, b1 = batch.labels.shape
    picks = _at_label_positions(greedy_next, batch.anchors, b1)
    followed = (batch.labels == picks).astype(mx.float32)
    # Label k needs the reply to have followed the target at positions 1..k-1.
    before = mx.concatenate([mx.ones((n, k, 1)), mx.cumprod(followed, axis=-1)[..., :-1]], axis=-1)
    valid = batch.valid * before
    labels = mx.where(valid > 0, picks, 0).astype(mx.int32)
    return BlockBatch(batch.tokens, batch.anchors, batch.block_ids, labels, valid)


def _attend(attn: DraftAttention, x: mx.array, ctx: mx.array, anchors: mx.array) -> mx.array:
    """DraftAttention over many blocks at once; x [N*K, B, D], ctx [N, L, D].

    A sequence's K blocks share its context, so their queries meet the context keys in
    one matmul a sequence and KV head ([N, hkv, K*g*B, L]); broadcasting the context over
    the blocks instead made MLX copy it K times, and its gradient summed K copies back
    (the attention's forward and backward took 2x as long on an H100, a training step
    1.6x: benchmarks/results/draft_train_step.jsonl). The softmax runs over the context
    and the block's own keys without joining the two score arrays."""
    n, k = anchors.shape
    nk, b, _ = x.shape
    length = ctx.shape[1]
    h, hkv = attn.num_heads, attn.num_kv_heads
    g = h // hkv
    flat = anchors.reshape(-1)
    q = attn.q_norm(attn.q_proj(x).reshape(nk, b, h, -1)).transpose(0, 2, 1, 3)
    q = attn.rope(q, offset=flat)
    d = q.shape[-1]
    block_k, block_v = attn._keys_values(x, flat)  # [NK, hkv, B, d]
    ctx_k, ctx_v = attn._keys_values(ctx, 0)  # [N, hkv, L, d]
    # Query head j of KV head i is head i * g + j: [N, hkv, K, g*B, d].
    q = (q * attn.scale).reshape(n, k, hkv, g * b, d).transpose(0, 2, 1, 3, 4)
    ctx_scores = q.reshape(n, hkv, k * g * b, d) @ ctx_k.swapaxes(-1, -2)
    ctx_scores = ctx_scores.astype(mx.float32).reshape(n, hkv, k, g * b, length)
    seen = mx.arange(length)[None, None, :] < anchors[:, :, None]  # context before s
    ctx_scores = mx.where(seen[:, None, :, None, :], ctx_scores, -1e30)
    block_k = block_k.reshape(n, k, hkv, b, d).transpose(0, 2, 1, 3, 4)  # [N, hkv, K, B, d]
    block_v = block_v.reshape(n, k, hkv, b, d).transpose(0, 2, 1, 3, 4)
    block_scores = (q @ block_k.swapaxes(-1, -2)).astype(mx.float32)  # [N, hkv, K, g*B, B]
    top = mx.maximum(ctx_scores.max(-1, keepdims=True), block_scores.max(-1, keepdims=True))
    top = mx.stop_gradient(top)  # any constant gives the same softmax; this one is stable
    ctx_w = mx.exp(ctx_scores - top)
    block_w = mx.exp(block_scores - top)
    total = ctx_w.sum(-1, keepdims=True) + block_w.sum(-1, keepdims=True)
    out = ctx_w.astype(x.dtype).reshape(n, hkv, k * g * b, length) @ ctx_v
    out = out.reshape(n, hkv, k, g * b, d) + block_w.astype(x.dtype) @ block_v
    out = (out / total).astype(x.dtype).reshape(n, hkv, k, g, b, d)  # normalised in float32
    out = out.transpose(0, 2, 4, 1, 3, 5).reshape(nk, b, -1)  # [N*K, B, h*d]
    return attn.o_proj(out)


def block_hidden(
    draft: DFlashDraftModel, block_embeddings: mx.array, target_hidden: mx.array, anchors: mx.array
) -> mx.array:
    """The draft's final hidden states for every block: [N*K, B, D].

    block_embeddings [N, K, B, D]; target_hidden [N, L, C] (captured states).
    """
    n, k, b, dim = block_embeddings.shape
    ctx = draft.hidden_norm(draft.fc(target_hidden))
    x = block_embeddings.reshape(n * k, b, dim)
    for layer in draft.layers:
        x = x + _attend(layer.self_attn, layer.input_layernorm(x), ctx, anchors)
        x = x + layer.mlp(layer.post_attention_layernorm(x))
    return draft.norm(x)


@dataclass(frozen=True, slots=True)
class VocabLoss:
    """The loss's head over a draft vocabulary, and labels mapped into it."""

    head: RestrictedHead
    index: mx.array  # [target vocab]: a token's position in the vocabulary, -1 outside

    @classmethod
    def of(cls, head: RestrictedHead) -> VocabLoss:
        ids = np.array(head.ids)
        index = np.full(head.vocab_size, -1, np.int32)
        index[ids] = np.arange(len(ids), dtype=np.int32)
        return cls(head, mx.array(index))

    @classmethod
    def build(cls, target: TargetAdapter, token_ids: Sequence[int]) -> VocabLoss:
        return cls.of(RestrictedHead(target.head_module, token_ids, target.vocab_size))


@dataclass(slots=True)
class BlockMetrics:
    loss: mx.array  # weighted mean cross-entropy (scalar)
    accuracy: mx.array  # [B-1]: argmax == label at each block position (valid ones)
    tau: mx.array  # mean over blocks of 1 + the accepted prefix length


def block_loss(
    draft: DFlashDraftModel,
    target: TargetAdapter,
    batch: BlockBatch,
    target_hidden: mx.array,
    weights: mx.array,
    vocab: VocabLoss | None = None,
) -> BlockMetrics:
    dtype = draft.fc.weight.dtype
    emb = target.embed(batch.block_ids)
    head_dtype = emb.dtype  # the target's activations: its LM head runs in its own dtype
    hidden = block_hidden(draft, emb.astype(dtype), target_hidden.astype(dtype), batch.anchors)
    head = target.lm_head if vocab is None else vocab.head.compact
    logits = head(hidden[:, 1:].astype(head_dtype)).astype(mx.float32)  # [NK, B-1, V]
    n, k, _ = batch.labels.shape
    labels = batch.labels.reshape(n * k, -1)
    valid = batch.valid.reshape(n * k, -1)
    if vocab is not None:
        labels = vocab.index[labels]
        valid = valid * (labels >= 0).astype(valid.dtype)
        labels = mx.maximum(labels, 0)
    picked = mx.take_along_axis(logits, labels[..., None], axis=-1)[..., 0]
    if batch.soft_ids is not None:
        soft = _soft_target_logit(logits, batch.soft_ids, batch.soft_probs, vocab)
        picked = (1.0 - SOFT_SHARE) * picked + SOFT_SHARE * soft
    ce = mx.logsumexp(logits, axis=-1) - picked
    w = weights[None, :] * valid
    loss = (ce * w).sum() / mx.maximum(w.sum(), 1e-6)
    hit = (mx.argmax(logits, axis=-1) == labels).astype(mx.float32) * valid
    accuracy = hit.sum(axis=0) / mx.maximum(valid.sum(axis=0), 1.0)
    accepted = mx.cumprod(hit, axis=-1).sum(axis=-1)
    tau = 1.0 + accepted.mean()
    return BlockMetrics(loss, mx.stop_gradient(accuracy), mx.stop_gradient(tau))


def _soft_target_logit(
    logits: mx.array, ids: mx.array, probs: mx.array | None, vocab: VocabLoss | None
) -> mx.array:
    """sum_i q_i * logit(id_i) over the target's top tokens, q renormalised over those the
    head has (so logsumexp minus it is the cross-entropy against q): [NK, B-1]."""
    assert probs is not None
    nk, b1 = logits.shape[:2]
    ids = ids.reshape(nk, b1, -1)
    q = probs.reshape(nk, b1, -1).astype(mx.float32)
    if vocab is not None:
        ids = vocab.index[ids]
        q = q * (ids >= 0).astype(q.dtype)
        ids = mx.maximum(ids, 0)
    q = q / mx.maximum(q.sum(axis=-1, keepdims=True), 1e-9)
    return (mx.take_along_axis(logits, ids, axis=-1) * q).sum(axis=-1)
