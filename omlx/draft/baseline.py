"""Plain (non-speculative) decoding with the same stopping rules, for DFlash comparisons."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import mlx.core as mx
import mlx.nn as nn

from omlx.draft.loop import DFlashParams
from omlx.draft.sampling import sample_with_temperature
from omlx.draft.stopping import StopCondition
from omlx.mlx_lm_compat import generate_step


@dataclass(slots=True)
class PlainResult:
    tokens: list[int]
    finish_reason: str | None
    prefill_s: float
    total_s: float

    @property
    def tokens_per_s(self) -> float:
        return len(self.tokens) / self.total_s if self.total_s > 0 else 0.0


def plain_generate(
    model: nn.Module,
    prompt_ids: Sequence[int],
    params: DFlashParams,
    decode: Callable[[list[int]], str] | None = None,
) -> PlainResult:
    """Decode one token per target pass through mlx-lm's `generate_step`."""
    mask = None
    if params.suppress_token_ids:
        mask = mx.zeros((model_vocab(model),), dtype=mx.bool_)
        mask[mx.array(params.suppress_token_ids)] = True

    def sampler(logprobs: mx.array) -> mx.array:
        return sample_with_temperature(logprobs, params.temperature, mask)

    stop = StopCondition(
        max_tokens=params.max_tokens,
        eos_token_ids=params.eos_token_ids,
        stop=params.stop,
        decode=decode,
    )
    start = time.perf_counter()
    prefill_s = 0.0
    steps = generate_step(
        mx.array(list(prompt_ids)), model, max_tokens=params.max_tokens, sampler=sampler
    )
    for token, _ in steps:
        if not prefill_s:
            prefill_s = time.perf_counter() - start
        stop.accept(int(token))
        if stop.done:
            break
    return PlainResult(stop.tokens, stop.finish_reason, prefill_s, time.perf_counter() - start)


def model_vocab(model: nn.Module) -> int:
    outer = getattr(model, "language_model", model)
    head = getattr(outer, "lm_head", None)
    weight = head.weight if head is not None else model.model.embed_tokens.weight
    return int(weight.shape[0])
