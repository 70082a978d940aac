"""Log-probabilities of a prompt's own tokens (OpenAI `echo` with `logprobs`), on the
model's thread: one forward pass over the prompt, no KV cache kept."""

from __future__ import annotations

from typing import Any

import mlx.core as mx

# One forward over the whole prompt holds [length, vocab] logits at once; past this
# many tokens the request is refused rather than risk that much memory.
MAX_PROMPT_TOKENS = 8192


def prompt_logprobs(
    model_and_tokenizer: tuple[Any, Any], text: str, top_n: int
) -> tuple[list[str], list[float | None], list[list[tuple[str, float]] | None]]:
    """(token texts, their logprobs, top alternatives); the first token has none."""
    from omlx.errors import ContextTooLong

    model, tokenizer = model_and_tokenizer
    ids = tokenizer.encode(text)  # as the engine tokenizes a text completion prompt
    if len(ids) > MAX_PROMPT_TOKENS:
        raise ContextTooLong(
            f"echo with logprobs reads at most {MAX_PROMPT_TOKENS} prompt tokens, got {len(ids)}",
            param="prompt",
        )
    logits = model(mx.array(ids)[None])[0].astype(mx.float32)
    logp = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
    chosen = mx.take_along_axis(logp[:-1], mx.array(ids[1:])[:, None], axis=-1)[:, 0]
    top_ids = mx.argsort(-logp[:-1], axis=-1)[:, :top_n] if top_n else None
    top_lp = mx.take_along_axis(logp[:-1], top_ids, axis=-1) if top_ids is not None else None
    mx.eval(chosen, *(x for x in (top_ids, top_lp) if x is not None))
    texts = [tokenizer.decode([t]) for t in ids]
    values: list[float | None] = [None, *chosen.tolist()]
    tops: list[list[tuple[str, float]] | None] = [None]
    for row in range(len(ids) - 1):
        if top_ids is None or top_lp is None:
            tops.append([])
            continue
        tops.append(
            [
                (tokenizer.decode([t]), lp)
                for t, lp in zip(top_ids[row].tolist(), top_lp[row].tolist(), strict=True)
            ]
        )
    return texts, values, tops
