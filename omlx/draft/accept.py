"""The DFlash greedy accept rule, in pure Python so policy tests run without MLX."""

from __future__ import annotations

from collections.abc import Sequence


def accept_length(draft_ids: Sequence[int], target_ids: Sequence[int]) -> int:
    """Length of the longest prefix on which the draft agrees with the target.

    `draft_ids[i]` is the draft's guess for block position i + 1 and `target_ids[i]`
    is the target's choice after reading block positions 0..i, so both lists are
    aligned on the token they predict. The cycle commits the accepted drafts plus the
    target's own token at the first disagreement (the bonus token): `accept_length + 1`
    tokens in all.
    """
    n = 0
    for draft, target in zip(draft_ids, target_ids, strict=False):
        if draft != target:
            break
        n += 1
    return n


def committed_tokens(draft_ids: Sequence[int], target_ids: Sequence[int]) -> list[int]:
    """The tokens one greedy cycle commits: the accepted drafts, then the bonus token."""
    n = accept_length(draft_ids, target_ids)
    if n >= len(target_ids):
        raise ValueError("target_ids must hold one more token than the accepted drafts")
    return [*draft_ids[:n], target_ids[n]]


def truncate_at_stop(
    tokens: Sequence[int], eos_ids: frozenset[int] | set[int], max_tokens: int
) -> tuple[list[int], bool]:
    """Cut committed tokens at the first EOS (kept) or at `max_tokens`.

    Returns the tokens to emit and whether generation ends here.
    """
    out: list[int] = []
    for token in tokens:
        if len(out) >= max_tokens:
            return out, True
        out.append(token)
        if token in eos_ids:
            return out, True
    return out, len(out) >= max_tokens
