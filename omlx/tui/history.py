"""Rolling throughput history for the sparklines (plain Python, no Textual)."""

from __future__ import annotations

from collections import deque

from omlx.schemas.stats import StatsSnapshot


class History:
    """The last `size` samples of total and per-model throughput, one per snapshot."""

    def __init__(self, size: int = 300) -> None:
        self.size = size
        self.generation: deque[float] = deque(maxlen=size)
        self.prompt: deque[float] = deque(maxlen=size)
        self.per_model: dict[str, deque[float]] = {}

    def add(self, snap: StatsSnapshot) -> None:
        self.generation.append(snap.generation_tps)
        self.prompt.append(snap.prompt_tps)
        seen = set()
        for m in snap.models:
            seen.add(m.model)
            self.per_model.setdefault(m.model, deque(maxlen=self.size)).append(m.generation_tps)
        for name, series in self.per_model.items():
            if name not in seen:
                series.append(0.0)

    def peak_generation(self) -> float:
        return max(self.generation, default=0.0)
