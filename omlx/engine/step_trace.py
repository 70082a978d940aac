"""Opt-in per-step timings of one engine loop, for benchmarks (`engine.step_trace`).

Off by default: the loop then holds None and tests it once per tick. On, every tick that
steps the batch appends one JSON line to the file: where the engine thread's time went
(commands, admission, the generator step split into its synchronising eval and the host
work around it, publishing events, the hand-off to asyncio), the thread's CPU time, how
long the requests admitted in that tick had waited, and how late the event loop ran the
earlier hand-offs, and how long Python's garbage collector held the GIL since the last
row (`gc_s`, any thread's collections). `benchmarks/serving_scale.py` reads the file per
load level.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

from omlx.engine.collector import CollectorPauses

WRITE_EVERY = 256  # rows buffered before a write (the file is read after the run)


class StepTrace:
    """Collects rows on the engine thread; `delivered` is called on the event loop."""

    def __init__(self, path: str | Path, model: str) -> None:
        self._path = Path(path)
        self._model = model
        self._rows: list[str] = []
        self._lags: list[float] = []
        self._admit_waits: list[float] = []
        self._prepares: list[float] = []
        self._firsts: list[float] = []
        self.batch: dict[str, Any] | None = None  # this tick's batch step, set by the loop
        self.sync_mark = 0.0  # the generator's cumulative sync time at the last step
        self._gc = CollectorPauses()
        self._write_now(
            {
                "kind": "meta",
                "model": model,
                "pid": os.getpid(),
                "engine_tid": threading.get_native_id(),
                "switch_interval_s": sys.getswitchinterval(),
            }
        )

    def admitted(self, sub: Any, now: float) -> None:
        """A request entered the batch: how long it waited queued, and how long templating
        and tokenizing took before that (a `Submission`; monotonic seconds)."""
        self._admit_waits.append(now - sub.submitted_at)
        if sub.received_at is not None:
            self._prepares.append(sub.submitted_at - sub.received_at)

    def first_token(self, sub: Any, now: float) -> None:
        """A request's first token left the generator (from its arrival at the engine)."""
        self._firsts.append(now - (sub.received_at or sub.submitted_at))

    def delivered(self, lag_s: float) -> None:
        """The event loop ran a hand-off `lag_s` after the engine made it (event loop)."""
        self._lags.append(lag_s)

    def step(self, row: dict[str, Any]) -> None:
        row = {"kind": "step", "t": time.monotonic(), **row}
        for key, name in (
            ("lags_s", "_lags"),
            ("admit_waits_s", "_admit_waits"),
            ("prepare_s", "_prepares"),
            ("first_token_s", "_firsts"),
        ):
            values = getattr(self, name)
            if values:
                setattr(self, name, [])
                row[key] = values
        gc_s, collections, oldest = self._gc.take()
        if collections:
            row.update(gc_s=gc_s, gc_n=collections, gc_gen=oldest)
        self._rows.append(json.dumps(row))
        if len(self._rows) >= WRITE_EVERY:
            self.flush()

    def idle(self) -> None:
        """The engine has nothing to run: mark it (once per busy spell) and write the rows,
        so a reader knows every step before this moment is on disk."""
        if self._rows:
            self._rows.append(json.dumps({"kind": "idle", "t": time.monotonic()}))
        self.flush()

    def flush(self) -> None:
        if not self._rows:
            return
        rows, self._rows = self._rows, []
        with self._path.open("a") as f:
            f.write("\n".join(rows) + "\n")

    def close(self) -> None:
        self._gc.close()
        self.flush()

    def _write_now(self, row: dict[str, Any]) -> None:
        self._path.parent.mkdir(parents=True, exist_ok=True)
        with self._path.open("a") as f:
            f.write(json.dumps(row) + "\n")


__all__ = ["StepTrace"]
