"""DFlash sampling: the product's `sample_with_temperature` and speculative acceptance.

Greedy (temperature < 1e-5) is an argmax, so DFlash is lossless there. For temperature
> 0 the verify step uses speculative sampling (Leviathan et al. / Chen et al.): draft
token x at a position is kept with probability min(1, p(x) / q(x)), where p is the
target's and q the draft's distribution at that position; at the first rejection the
emitted token is drawn from norm(max(p - q, 0)), and when all drafts are kept the bonus
token is drawn from p. Every emitted token is then distributed exactly as the target's
own temperature sample. Drafting by argmax is the case q = one-hot(x).
"""

from __future__ import annotations

import mlx.core as mx

GREEDY_TEMPERATURE = 1e-5


def _masked(logits: mx.array, suppress_token_mask: mx.array | None) -> mx.array:
    if suppress_token_mask is None:
        return logits
    return mx.where(suppress_token_mask, mx.array(-mx.inf, dtype=logits.dtype), logits)


def greedy_tokens_with_mask(
    logits: mx.array, suppress_token_mask: mx.array | None = None
) -> mx.array:
    """Argmax over the last axis, never choosing a suppressed token."""
    return mx.argmax(_masked(logits, suppress_token_mask), axis=-1).astype(mx.uint32)


def sample_with_temperature(
    logits: mx.array, temperature: float, suppress_token_mask: mx.array | None = None
) -> mx.array:
    """Greedy below 1e-5, else a categorical sample of `logits / temperature`.

    The mask (True = suppressed) applies in both modes, so a suppressed token can never
    be sampled either.
    """
    if temperature < GREEDY_TEMPERATURE:
        return greedy_tokens_with_mask(logits, suppress_token_mask)
    scaled = _masked(logits, suppress_token_mask) / temperature
    return mx.random.categorical(scaled).astype(mx.uint32)


def probabilities(
    logits: mx.array, temperature: float, suppress_token_mask: mx.array | None = None
) -> mx.array:
    """softmax(logits / temperature) in float32, suppressed tokens at probability 0."""
    scaled = _masked(logits.astype(mx.float32), suppress_token_mask) / temperature
    return mx.softmax(scaled, axis=-1)


def speculative_accept(
    draft_ids: list[int],
    target_probs: mx.array,
    draft_probs: mx.array | None,
) -> tuple[int, int]:
    """Speculative-sampling verify of one draft block.

    Args:
        draft_ids: the n drafted tokens.
        target_probs: [n + 1, V] target distributions; row i follows draft_ids[:i].
        draft_probs: [n, V] distributions the drafts were sampled from, or None when
            they were chosen by argmax (q is then one-hot at the drafted token).

    Returns:
        (number of drafts kept, the token emitted after them).
    """
    n = len(draft_ids)
    if n:
        ids = mx.array(draft_ids)[:, None]
        p = mx.take_along_axis(target_probs[:n], ids, axis=-1)[:, 0]
        q = 1.0 if draft_probs is None else mx.take_along_axis(draft_probs, ids, axis=-1)[:, 0]
        # u < p / q, written without dividing by a zero q.
        keep = (mx.random.uniform(shape=(n,)) * q < p).tolist()
        num_kept = next((i for i, ok in enumerate(keep) if not ok), n)
    else:
        num_kept = 0
    if num_kept == n:
        return n, int(mx.random.categorical(mx.log(target_probs[n])).item())
    p = target_probs[num_kept]
    if draft_probs is None:
        residual = p * (mx.arange(p.shape[-1]) != draft_ids[num_kept])
    else:
        residual = mx.maximum(p - draft_probs[num_kept], 0.0)
    return num_kept, int(mx.random.categorical(mx.log(residual)).item())


def speculative_outcome(
    draft: mx.array, target_probs: mx.array, draft_probs: mx.array | None
) -> tuple[mx.array, mx.array]:
    """`speculative_accept` on the device, nothing read back: (number of drafts kept, a
    scalar; the token emitted after them, shape [1]).

    The same rule (draft i kept while u_i * q_i < p_i; the token after them drawn from
    norm(max(p - q, 0)) at the first rejection, from p when every draft was kept), so
    the emitted tokens are distributed as the target's own samples, and the random
    numbers are drawn as the host version draws them (the uniforms, then the token).
    """
    n = draft.shape[0]
    vocab = target_probs.shape[-1]
    ids = draft.astype(mx.int32)
    p = mx.take_along_axis(target_probs[:n], ids[:, None], axis=-1)[:, 0]
    if draft_probs is None:
        q: mx.array | float = 1.0
    else:
        q = mx.take_along_axis(draft_probs, ids[:, None], axis=-1)[:, 0]
    keep = (mx.random.uniform(shape=(n,)) * q < p).astype(mx.int32)
    num_kept = mx.cumprod(keep, axis=0).sum()
    row = mx.take(target_probs, num_kept, axis=0)
    if draft_probs is None:
        # Past the last draft no token is excluded (index `vocab` matches none).
        excluded = mx.take(mx.concatenate([ids, mx.array([vocab], mx.int32)]), num_kept)
        residual = row * (mx.arange(vocab) != excluded)
    else:
        padded = mx.concatenate([draft_probs, mx.zeros((1, vocab), draft_probs.dtype)])
        residual = mx.maximum(row - mx.take(padded, num_kept, axis=0), 0.0)
    bonus = mx.random.categorical(mx.log(residual)).astype(mx.uint32).reshape(1)
    return num_kept, bonus
