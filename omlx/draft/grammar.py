"""What DFlash needs of an output grammar (duck-typed: the engine's RowMatcher has it).

A draft block is checked against the grammar before the target verifies it: the matcher
walks the drafted tokens, giving the mask after each, and stops at the first token it
refuses (the target's masked choice there can never be that token, so acceptance ends
at it). The walk is then rolled back, and the committed tokens are consumed for good.
"""

from __future__ import annotations

from typing import Protocol

import mlx.core as mx
import numpy as np


class TokenGrammar(Protocol):
    def keep(self, vocab: int) -> np.ndarray:
        """The tokens allowed next, one bool per logit."""
        ...

    def consume(self, tokens: list[int]) -> None: ...

    def rollback(self, num_tokens: int) -> None: ...


def block_masks(grammar: TokenGrammar, draft_ids: list[int], vocab: int) -> tuple[int, np.ndarray]:
    """(drafts worth verifying, [that + 1, vocab] masks): row i is the mask after the
    first i drafts. A refused draft is kept as the last one (it is then rejected, as
    speculative sampling needs), and its row past it repeats the row before (never read).
    """
    masks = [grammar.keep(vocab)]
    num_walked = 0
    for token in draft_ids:
        if not masks[-1][token]:
            masks.append(masks[-1])
            break
        grammar.consume([token])
        num_walked += 1
        masks.append(grammar.keep(vocab))
    grammar.rollback(num_walked)
    return len(masks) - 1, np.stack(masks)


def suppressed(keep: np.ndarray, mask: mx.array | None) -> mx.array:
    """The grammar's refusals (True = never chosen) joined with the request's own mask."""
    refused = mx.array(~keep)
    return refused if mask is None else mx.logical_or(refused, mask)
