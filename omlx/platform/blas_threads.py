"""How many OpenBLAS threads to run, from how busy the machine's other processes are.

One BLAS thread fewer than cores is the safe choice (blas.default_num_threads): OpenBLAS
threads spin at barriers, and when one loses its core to another process a whole matmul
waits (on 2 cores with one busy, prefill fell from ~190 to ~25 tok/s with 2 threads).
On an idle machine every core is worth using, though: serving on 2 idle cores ran 13-23%
faster with 2 threads (benchmarks/results/serving_blas_threads.md). So while omlx chose
the thread count itself, a governor thread looks twice a second; it reads the
CPU time of other processes (/proc/stat less this process) and uses every core only
while they leave the machine alone, and only while a single engine computes.

Pure Python (Linux /proc); `blas.thread_control()` applies the choice.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

SAMPLE_EVERY_S = 0.5
GROW_AFTER_SAMPLES = 4  # calm samples in a row before a thread is added
GROW_BELOW_CORES = 0.15  # others' load under which a thread is added
SHRINK_ABOVE_CORES = 0.30  # ... and over which one is taken away (hysteresis between)


def threads_for(others_busy: float, num_cores: int, current: int) -> int:
    """The thread count for `others_busy` cores of load by other processes."""

    def fit(slack: float) -> int:
        taken = math.ceil(max(0.0, others_busy - slack))
        return max(1, min(num_cores, num_cores - taken))

    grow, shrink = fit(GROW_BELOW_CORES), fit(SHRINK_ABOVE_CORES)
    if current < grow:
        return grow
    if current > shrink:
        return shrink
    return current


@dataclass(slots=True)
class CpuSample:
    wall_s: float
    machine_busy_s: float  # all processes, steal included (time this VM could not run)
    own_s: float  # this process, all threads


def read_sample(proc_stat: Path = Path("/proc/stat")) -> CpuSample | None:
    try:
        first = proc_stat.read_text().split("\n", 1)[0].split()
    except OSError:
        return None
    if not first or first[0] != "cpu" or len(first) < 9:
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in first[1:9])
    hz = os.sysconf("SC_CLK_TCK")
    t = os.times()
    return CpuSample(
        wall_s=time.monotonic(),
        machine_busy_s=(user + nice + system + irq + softirq + steal) / hz,
        own_s=t.user + t.system,
    )


def others_busy_cores(a: CpuSample, b: CpuSample) -> float:
    wall = b.wall_s - a.wall_s
    if wall <= 0:
        return 0.0
    return max(0.0, (b.machine_busy_s - a.machine_busy_s) - (b.own_s - a.own_s)) / wall


@dataclass
class ThreadGovernor:
    """One per process. A daemon thread samples the machine every SAMPLE_EVERY_S and
    applies the thread count; engines only report whether they are busy (`tick`).

    The sampling runs beside the engines, not between their steps: a step slowed down by
    a lost core would otherwise delay its own cure. Growing waits for GROW_AFTER_SAMPLES
    calm samples in a row, so a machine whose other load comes and goes settles on fewer
    threads rather than flapping.
    """

    apply: Callable[[int], None]
    num_cores: int
    current: int
    sample: Callable[[], CpuSample | None] = read_sample
    _last: CpuSample | None = None
    _calm: int = 0  # consecutive samples that would let the count grow
    _busy_engines: dict[str, float] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _thread: threading.Thread | None = None
    _switched: bool = False  # the first switch is logged at INFO, later ones at DEBUG
    background: bool = True  # tests drive step() themselves

    def tick(self, engine: str, busy: bool) -> None:
        """An engine's report, once per step: whether it has work."""
        with self._lock:
            if busy:
                self._busy_engines[engine] = time.monotonic()
            else:
                self._busy_engines.pop(engine, None)
        self.start()

    def start(self) -> None:
        """Start sampling (idempotent). Engines start it with their first tick; a batch
        job (`omlx draft train`) that has no engine loop calls it once."""
        with self._lock:
            if self._thread is None and self.background:
                self._thread = threading.Thread(
                    target=self._run, name="omlx-blas-threads", daemon=True
                )
                self._thread.start()

    def _run(self) -> None:
        while True:
            time.sleep(SAMPLE_EVERY_S)
            self.step()

    def step(self) -> int:
        """Sample once; change the thread count if the load says so. Returns the count."""
        new = self.sample()
        if new is None:
            return self.current
        last, self._last = self._last, new
        if last is None:
            return self.current
        others = others_busy_cores(last, new)
        with self._lock:
            now = time.monotonic()
            busy = [t for t in self._busy_engines.values() if now - t < 4 * SAMPLE_EVERY_S]
        # Several engines computing at once already use the cores between them.
        cap = max(1, self.num_cores - 1) if len(busy) > 1 else self.num_cores
        want = min(cap, threads_for(others, self.num_cores, self.current))
        if want > self.current:
            self._calm += 1
            if self._calm < GROW_AFTER_SAMPLES:
                return self.current
        self._calm = 0
        if want != self.current:
            # Other load comes and goes: the first switch says the governor works, the
            # rest would flood INFO (six in a minute beside a busy neighbour).
            log.log(
                logging.DEBUG if self._switched else logging.INFO,
                "BLAS threads %d -> %d (other processes use %.2f cores)",
                self.current, want, others,
            )  # fmt: skip
            self._switched = True
            self.apply(want)
            self.current = want
        return self.current


_governor: ThreadGovernor | None = None
_governor_lock = threading.Lock()


def process_governor() -> ThreadGovernor | None:
    """The process's governor, or None when omlx did not choose the thread count (the user
    set OPENBLAS_NUM_THREADS) or no OpenBLAS is loaded."""
    global _governor
    from omlx.platform import blas

    with _governor_lock:
        if _governor is None:
            control = blas.thread_control()
            if control is None or read_sample() is None:
                return None
            cores = os.cpu_count() or 1
            _governor = ThreadGovernor(control, cores, blas.default_num_threads(cores))
        return _governor
