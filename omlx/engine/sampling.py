"""Per-request samplers and logits processors for one shared batch (engine thread, MLX).

mlx-lm's GenerationBatch calls each sequence's sampler on its own row of log-probs (raw
logits when every row's sampler is marked `takes_logits`), so requests with different
settings (and seeds) decode in the same batch.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import mlx.core as mx

from omlx.engine.api import SamplingParams
from omlx.mlx_lm_compat import apply_min_p, apply_top_k, apply_top_p
from omlx.mlx_lm_compat.batch_join import row_logprobs, takes_logits

Sampler = Callable[[mx.array], mx.array]
LogitsProcessor = Callable[[mx.array, mx.array], mx.array]


@takes_logits
def greedy_sampler(logits: mx.array) -> mx.array:
    return mx.argmax(logits, axis=-1)


def make_sampler(params: SamplingParams, vocab_size: int) -> Sampler:
    """Greedy requests share one greedy sampler, and unseeded requests with equal
    settings share one sampler too, so a batch of them samples in one call (GenerationBatch
    takes the batched path only when every row has the same sampler object). A seeded
    request gets its own PRNG key, hence its own sampler. Only top-p reads probabilities
    (it exponentiates), so only its samplers need the batch's logits normalised."""
    params = params.with_defaults({})  # the engine filled unset fields; any left are neutral
    if params.is_greedy:
        return greedy_sampler
    settings = (params.temperature, params.top_p, params.min_p, params.top_k, vocab_size)
    if params.seed is None:
        return _shared_sampler(*settings)
    # Any int is a valid OpenAI seed; mx.random.key takes an unsigned 64-bit one.
    return _sampler(*settings, key=[mx.random.key(params.seed % 2**64)])


@functools.lru_cache(maxsize=64)
def _shared_sampler(
    temperature: float, top_p: float, min_p: float, top_k: int, vocab_size: int
) -> Sampler:
    return _sampler(temperature, top_p, min_p, top_k, vocab_size, key=None)


def _sampler(
    temperature: float,
    top_p: float,
    min_p: float,
    top_k: int,
    vocab_size: int,
    *,
    key: list[mx.array] | None,
) -> Sampler:
    filters: list[Callable[[mx.array], mx.array]] = []
    if 0 < top_p < 1.0:
        filters.append(lambda x: apply_top_p(x, top_p))
    if min_p > 0.0:
        filters.append(lambda x: apply_min_p(x, min_p))
    if 0 < top_k < vocab_size:
        filters.append(lambda x: apply_top_k(x, top_k))
    inv_temp = 1.0 / temperature

    def sample(logprobs: mx.array) -> mx.array:
        for f in filters:
            logprobs = f(logprobs)
        if key is None:
            return mx.random.categorical(logprobs * inv_temp)
        # A per-request key, split once per token: the same seed gives the same tokens
        # whatever else shares the batch.
        key[0], sub = mx.random.split(key[0])
        return mx.random.categorical(logprobs * inv_temp, key=sub)

    return sample if 0 < top_p < 1.0 else takes_logits(sample)


def make_logits_processors(params: SamplingParams, num_prompt_tokens: int) -> list[LogitsProcessor]:
    """logit_bias, then the repetition (whole context), presence and frequency
    (generated tokens only, as OpenAI defines them) penalties."""
    procs: list[LogitsProcessor] = []
    params = params.with_defaults({})
    if params.logit_bias:
        procs.append(LogitBias(params.logit_bias))
    if params.repetition_penalty != 1.0:
        procs.append(_repetition_penalty(params.repetition_penalty))
    if params.presence_penalty or params.frequency_penalty:
        procs.append(
            _openai_penalties(params.presence_penalty, params.frequency_penalty, num_prompt_tokens)
        )
    return procs


class LogitBias:
    """OpenAI's logit_bias as a logits processor that needs no token context.

    `batched_bias` (ids, values) lets the batch apply every row's bias in one scatter
    instead of a slice, an add and a concatenation per row and step
    (omlx.mlx_lm_compat.batch_join reads it).
    """

    __slots__ = ("_ids", "_vals", "batched_bias")

    def __init__(self, bias: dict[int, float]) -> None:
        ids = [int(k) for k in bias]
        vals = [float(v) for v in bias.values()]
        self.batched_bias = (ids, vals)
        self._ids = mx.array(ids)
        self._vals = mx.array(vals, dtype=mx.float32)

    def __call__(self, _tokens: mx.array, logits: mx.array) -> mx.array:
        return logits.at[:, self._ids].add(self._vals.astype(logits.dtype))


def _repetition_penalty(penalty: float) -> LogitsProcessor:
    def apply(tokens: mx.array, logits: mx.array) -> mx.array:
        if tokens.size == 0:
            return logits
        picked = logits[:, tokens]
        logits[:, tokens] = mx.where(picked < 0, picked * penalty, picked / penalty)
        return logits

    return apply


def _openai_penalties(presence: float, frequency: float, num_prompt: int) -> LogitsProcessor:
    def apply(tokens: mx.array, logits: mx.array) -> mx.array:
        generated = tokens[num_prompt:]
        if generated.size == 0:
            return logits
        counts = mx.zeros((logits.shape[-1],), dtype=logits.dtype).at[generated].add(1)
        penalty = counts * frequency + (counts > 0).astype(logits.dtype) * presence
        return logits - penalty[None]

    return apply


def forcing_processor(next_forced: Callable[[], int | None]) -> LogitsProcessor:
    """Forces the token next_forced() returns (when not None) by masking all others."""

    def apply(_tokens: mx.array, logits: mx.array) -> mx.array:
        token = next_forced()
        if token is None:
            return logits
        keep = mx.arange(logits.shape[-1]) == token
        return mx.where(keep, logits, mx.array(-float("inf"), logits.dtype))

    return apply


def token_logprobs(
    logprobs: mx.array, token: int, top_n: int
) -> tuple[float, list[tuple[int, float]]]:
    """The chosen token's log-prob and the top_n alternatives, as Python values.

    `logprobs` is a batch response's row, normalised or not (see `row_logprobs`)."""
    logprobs = row_logprobs(logprobs)
    chosen = logprobs[token].item()
    if top_n <= 0:
        return chosen, []
    top_ids = mx.argpartition(-logprobs, kth=top_n - 1)[:top_n]
    top_vals = logprobs[top_ids]
    pairs = sorted(zip(top_ids.tolist(), top_vals.tolist(), strict=True), key=lambda p: -p[1])
    return chosen, pairs
