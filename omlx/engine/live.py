"""What the engine thread keeps per admitted request, and its final events (pure Python)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from omlx.engine.api import Done, Failed, FinishReason, RequestId
from omlx.engine.commands import Submission
from omlx.engine.text.detokenize import TextStream
from omlx.engine.text.thinking import ThinkBudget


@dataclass(slots=True)
class Live:
    """One admitted request on the engine thread."""

    sub: Submission
    text: TextStream
    cached_tokens: int
    uid: int | None = None  # None when served by the alternative path
    alt: Iterator[list[int]] | None = None
    served_by: str = "batch"
    prefilling: bool = True
    snapshot_at: int | None = None  # prompt position where the prefix cache wants a store
    num_generated: int = 0
    last_token_at: float | None = None
    progress_at: float = 0.0  # when the last Progress event went out
    think: ThinkBudget | None = None

    @property
    def request_id(self) -> RequestId:
        return self.sub.request_id

    def advance(
        self, token: int, eos_ids: frozenset[int], batch_reason: str | None
    ) -> tuple[str, FinishReason | None]:
        """One generated token: its emittable text and why the request ends, if it does."""
        self.num_generated += 1
        if self.think is not None:
            self.think.observe(token)
        is_eos = token in eos_ids
        text = "" if is_eos else self.text.add(token)
        reason = None
        if self.text.stopped or is_eos:
            reason = FinishReason.STOP
        elif batch_reason == "length" or self.num_generated >= self.sub.prompt.max_tokens:
            reason = FinishReason.LENGTH
        if reason is not None and not self.text.stopped:
            text += self.text.finish()  # the held-back text was not a stop string after all
        return text, reason


@dataclass(slots=True)
class Finished:
    live: Live
    reason: FinishReason
    tokens: list[int] | None = None  # what the per-sequence cache holds, for the prefix cache
    cache: list[Any] | None = None


def done_event(
    sub: Submission,
    reason: FinishReason,
    completion: int,
    cached: int,
    served_by: str = "batch",
    stop_sequence: str | None = None,
) -> Done:
    return Done(
        sub.request_id,
        reason,
        len(sub.prompt.token_ids),
        completion,
        cached,
        served_by,
        stop_sequence,
    )


def failed_event(sub: Submission, error: Exception) -> Failed:
    return Failed(sub.request_id, error)
