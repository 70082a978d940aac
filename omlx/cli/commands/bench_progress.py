"""What `omlx bench` shows on stderr while it runs: a live bar on a terminal, one line
per step otherwise (logs, CI), nothing with --json. stdout keeps only the result."""

from __future__ import annotations

import time
from types import TracebackType

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)

from omlx.loadgen.scenarios import LevelResult


class BenchProgress:
    """`phase` for the steps before the sweep (starting a server, loading the model),
    `level` and `request_done` during it, `level_done` after each level."""

    def __init__(self, console: Console, *, num_requests: int, num_levels: int, quiet: bool):
        self._console = console
        self._quiet = quiet
        self._live = not quiet and console.is_terminal
        self._num_levels = num_levels
        self._level = 0
        self._started = time.perf_counter()
        self._progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("requests"),
            TimeElapsedColumn(),
            console=console,
            transient=True,
            disable=not self._live,
        )
        self._task = self._progress.add_task("starting", total=num_requests)

    def __enter__(self) -> BenchProgress:
        self._progress.__enter__()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._progress.__exit__(kind, error, tb)

    def phase(self, text: str) -> None:
        if self._live:
            self._progress.update(self._task, description=text)
        else:
            self._line(text)

    def level(self, concurrency: int, prompt_words: int, num_requests: int) -> None:
        self._level += 1
        text = (
            f"level {self._level}/{self._num_levels}: {num_requests} requests, "
            f"{concurrency} at a time, "
            + (f"prompts of ~{prompt_words} tokens" if prompt_words else "prompts from the file")
        )
        self.phase(text)

    def request_done(self) -> None:
        self._progress.advance(self._task)

    def level_done(self, result: LevelResult) -> None:
        failed = f", {result.num_failed} failed" if result.num_failed else ""
        self._line(
            f"level {self._level}/{self._num_levels} done in {result.wall_s:.1f} s: "
            f"{result.aggregate_tps:.1f} tok/s{failed}"
        )

    def _line(self, text: str) -> None:
        if self._quiet:
            return
        elapsed = time.perf_counter() - self._started
        # On a terminal the line prints above the live bar; elsewhere it is the progress.
        self._console.print(f"[{elapsed:5.0f} s] {text}", highlight=False, markup=False)
