"""Per-request DFlash statistics: acceptance length, phase times, throughput."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


@dataclass(slots=True)
class DFlashStats:
    """What one DFlash generation measured.

    `acceptance_lengths` holds, per cycle, the tokens committed (accepted drafts plus
    the target's bonus token): τ is their mean, from 1 (nothing accepted) to the draft
    block size. With the generator's `sync_phases`, `draft_s` runs until the drafted ids
    are computed, `verify_s` from there through the accept decision, `rollback_s` over
    cache trimming and tape replay; without it the device overlaps draft and verify, and
    `draft_s` is only the host's time to queue the draft.
    """

    draft_block_size: int
    prompt_tokens: int = 0
    generated_tokens: int = 0
    acceptance_lengths: list[int] = field(default_factory=list)
    prefill_s: float = 0.0
    draft_s: float = 0.0
    verify_s: float = 0.0
    rollback_s: float = 0.0
    total_s: float = 0.0
    served_by: str = "dflash"

    @property
    def num_cycles(self) -> int:
        return len(self.acceptance_lengths)

    @property
    def acceptance_length(self) -> float:
        """τ: mean tokens committed per draft/verify cycle (0.0 before the first)."""
        if not self.acceptance_lengths:
            return 0.0
        return sum(self.acceptance_lengths) / len(self.acceptance_lengths)

    def histogram(self) -> dict[int, int]:
        """Cycles per committed length, for every length 1..draft_block_size."""
        counts = Counter(self.acceptance_lengths)
        return {n: counts.get(n, 0) for n in range(1, self.draft_block_size + 1)}

    @property
    def decode_s(self) -> float:
        return max(self.total_s - self.prefill_s, 0.0)

    @property
    def tokens_per_s(self) -> float:
        """Generated tokens over the whole request time (prefill included)."""
        return self.generated_tokens / self.total_s if self.total_s > 0 else 0.0

    @property
    def decode_tokens_per_s(self) -> float:
        return self.generated_tokens / self.decode_s if self.decode_s > 0 else 0.0

    def to_dict(self) -> dict[str, object]:
        return {
            "served_by": self.served_by,
            "draft_block_size": self.draft_block_size,
            "prompt_tokens": self.prompt_tokens,
            "generated_tokens": self.generated_tokens,
            "cycles": self.num_cycles,
            "acceptance_length": self.acceptance_length,
            "acceptance_histogram": self.histogram(),
            "prefill_s": self.prefill_s,
            "draft_s": self.draft_s,
            "verify_s": self.verify_s,
            "rollback_s": self.rollback_s,
            "total_s": self.total_s,
            "tokens_per_s": self.tokens_per_s,
            "decode_tokens_per_s": self.decode_tokens_per_s,
        }
