"""The grammar's token mask applied to one row's logits before sampling (engine thread, MLX).

A logits processor per constrained row: mlx-lm's GenerationBatch calls it with the row's
context (prompt + generated tokens) and logits, so rows without one pay nothing. It first
queues the step's forward pass, so the mask is computed on the CPU while the model runs;
then it feeds the row's matcher the tokens generated since its last call (the context
ends with last step's sampled token) and masks every token the grammar forbids.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np

from omlx.engine.constraints import RowMatcher, allowed_ids
from omlx.engine.sampling import LogitsProcessor


def grammar_processor(row: RowMatcher, num_prompt: int) -> LogitsProcessor:
    def apply(tokens: mx.array, logits: mx.array) -> mx.array:
        mx.async_eval(logits)
        start = num_prompt + row.num_consumed
        if tokens.size > start:
            row.consume(tokens[start:].tolist())
        return apply_mask(logits, row.fill())

    return apply


def apply_mask(logits: mx.array, words: np.ndarray) -> mx.array:
    """logits [1, V] pushed to the dtype's lowest value wherever the bitmask `words` has a 0.

    The lowest finite value, not -inf: it samples the same (probability 0) and costs a
    quarter of `mx.where`, which the CPU backend runs unvectorized (1.3 ms vs 0.3 ms per
    262k-token row). The bits are unpacked on the CPU (15 µs) and sent as one uint8 row.
    """
    vocab = logits.shape[-1]
    keep = mx.array(allowed_ids(words, vocab).view(np.uint8)).astype(logits.dtype)
    return logits + (keep - 1) * mx.finfo(logits.dtype).max
