"""Which NVIDIA GPU a benchmark ran on, and what it was doing while each level measured.

Two GPU sessions timed the same 64-row decode step at ~13 ms in one level and ~22 ms in
another, and nothing said whether the clocks, the power cap, another tenant's process or a
different card was the cause. `gpu_identity()` names the card and its settings once per
run; `GpuSampler` asks `nvidia-smi` for clocks, power, temperature, utilisation, memory,
the clock event (throttle) reasons and the compute processes every quarter second on a
background thread, and `summary(since, until)` condenses one measured level's window.

Plain Python, no MLX. Without `nvidia-smi` (Apple silicon, CPU runs) everything returns
None or stays empty and no thread starts.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

# (our key, nvidia-smi --query-gpu field)
IDENTITY_FIELDS = (
    ("name", "name"),
    ("driver_version", "driver_version"),
    ("memory_total_mib", "memory.total"),
    ("persistence_mode", "persistence_mode"),
    ("mig_mode", "mig.mode.current"),
    ("compute_mode", "compute_mode"),
    ("max_sm_clock_mhz", "clocks.max.sm"),
    ("max_mem_clock_mhz", "clocks.max.memory"),
    ("power_limit_w", "power.limit"),
    ("uuid", "uuid"),  # tells two sessions on the same model of card apart
    ("pci_bus_id", "pci.bus_id"),
)
NUMERIC_FIELDS = (
    ("sm_clock_mhz", "clocks.sm"),
    ("mem_clock_mhz", "clocks.mem"),
    ("power_w", "power.draw"),
    ("temp_c", "temperature.gpu"),
    ("util_pct", "utilization.gpu"),
    ("mem_used_mib", "memory.used"),
)
PSTATE_FIELD = "pstate"
# Newer drivers name the bitmask clocks_event_reasons (NVML's rename, around R535); older
# ones know only clocks_throttle_reasons. The first one this nvidia-smi accepts is used.
REASON_FIELDS = ("clocks_event_reasons.active", "clocks_throttle_reasons.active")
# NVML's nvmlClocksEventReason* bits.
REASON_BITS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
APPS_QUERY = "--query-compute-apps=pid,used_memory"
NOT_AVAILABLE = {"", "N/A", "[N/A]", "[Not Supported]", "Not Supported", "[Unknown Error]"}
CALL_TIMEOUT_S = 5.0


def find_nvidia_smi() -> str | None:
    return shutil.which("nvidia-smi")


def device_args(smi: str) -> list[str]:
    """Selects the GPU the benchmark runs on: the first CUDA_VISIBLE_DEVICES entry (an index
    or a UUID, both of which `nvidia-smi --id` takes), else GPU 0; nothing (all GPUs) where
    nvidia-smi refuses the selector."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    args = [f"--id={visible or 0}"]
    return args if run_query(smi, [*args, "--query-gpu=index"]) else []


def parse_value(text: str) -> int | float | str | None:
    text = text.strip()
    if text in NOT_AVAILABLE:
        return None
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def run_query(smi: str, args: list[str]) -> list[list[str]] | None:
    """nvidia-smi's CSV rows (no header, no units), or None when it fails in any way."""
    try:
        done = subprocess.run(
            [smi, *args, "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=CALL_TIMEOUT_S,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    # An unknown field is an error exit; the text check guards a version that exits 0.
    if done.returncode != 0 or "is not a valid field" in done.stdout:
        return None
    return [[cell.strip() for cell in line.split(",")] for line in done.stdout.splitlines()]


def query_gpu(smi: str, fields: list[str], select: list[str]) -> list[str] | None:
    """One GPU's values for `fields`, None when nvidia-smi rejects a field or fails."""
    rows = run_query(smi, [*select, f"--query-gpu={','.join(fields)}"])
    if not rows or len(rows[0]) != len(fields):
        return None
    return rows[0]


def usable_fields(smi: str, fields: list[str], select: list[str]) -> list[str]:
    """`fields` less those this nvidia-smi does not know (one call when all are known)."""
    if query_gpu(smi, fields, select) is not None:
        return list(fields)
    return [f for f in fields if query_gpu(smi, [f], select) is not None]


def gpu_identity(smi: str | None = None) -> dict | None:
    """The card and its settings, once per run; None without a working nvidia-smi."""
    smi = smi or find_nvidia_smi()
    if smi is None:
        return None
    names = {query: key for key, query in IDENTITY_FIELDS}
    select = device_args(smi)
    fields = usable_fields(smi, list(names), select)
    values = query_gpu(smi, fields, select) if fields else None
    if values is None:
        return None
    return {names[f]: parse_value(v) for f, v in zip(fields, values, strict=True)}


def reason_names(mask: int) -> list[str]:
    return [name for bit, name in REASON_BITS.items() if mask & bit]


def parent_pid(pid: int) -> int | None:
    """Linux /proc; None where the process is gone or not visible from here."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])


def descends_from(pid: int, root: int) -> bool:
    """Whether `pid` is `root` or one of its descendants (the servers a benchmark starts)."""
    for _ in range(64):  # a bound, in case /proc changes under the walk
        if pid == root:
            return True
        parent = parent_pid(pid)
        if parent is None or parent <= 1:
            return False
        pid = parent
    return False


@dataclass(slots=True)
class Sample:
    t: float  # time.monotonic() halfway through the nvidia-smi call
    values: dict[str, int | float | None]
    pstate: str | None = None
    reasons_mask: int | None = None


@dataclass(slots=True)
class AppsSample:
    t: float
    apps: list[tuple[int, int | None]]  # (pid, used MiB)
    foreign: list[int] = field(default_factory=list)


class GpuSampler:
    """Background sampling of the GPU's state; a no-op without nvidia-smi.

    Each tick is one nvidia-smi call for the GPU's state; the compute processes (a second
    call) are asked once per `apps_interval_s`: a tenant holds the GPU for seconds.
    """

    def __init__(
        self,
        interval_s: float = 0.25,
        apps_interval_s: float = 1.0,
        smi: str | None = None,
        root_pid: int | None = None,
    ) -> None:
        self.interval_s = interval_s
        self.apps_interval_s = apps_interval_s
        self.smi = smi or find_nvidia_smi()
        self.root_pid = root_pid or os.getpid()
        self.samples: list[Sample] = []
        self.apps_samples: list[AppsSample] = []
        self.fields: list[str] = []
        self.select: list[str] = []  # --id=N of the benchmark's GPU; settled by probe()
        self._apps_select: list[str] | None = None
        self._own: dict[int, bool] = {}  # pid -> ours; a pid keeps its answer
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_apps_t = float("-inf")
        self._apps_due = False

    @property
    def available(self) -> bool:
        return bool(self.fields)

    @property
    def is_running(self) -> bool:
        return self._thread is not None

    def probe(self) -> bool:
        """Settle the fields this nvidia-smi accepts (once); False when none work."""
        if self.fields or self.smi is None:
            return self.available
        self.select = device_args(self.smi)
        self._apps_select = self.select
        base = [query for _, query in NUMERIC_FIELDS] + [PSTATE_FIELD]
        fields = usable_fields(self.smi, [*base, REASON_FIELDS[0]], self.select)
        if fields and REASON_FIELDS[0] not in fields:
            older = REASON_FIELDS[1:]
            fields += [f for f in older if query_gpu(self.smi, [f], self.select)][:1]
        self.fields = fields
        return self.available

    def start(self) -> GpuSampler:
        if self._thread is None and self.probe():
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="gpu-sampler", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._wake.set()
            self._thread.join(timeout=2 * CALL_TIMEOUT_S)
            self._thread = None

    def __enter__(self) -> GpuSampler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def wake(self) -> None:
        """Sample the state and the processes now rather than at the next tick, so a
        window shorter than the apps interval still sees who was on the GPU."""
        self._apps_due = True
        self._wake.set()

    def window(self) -> GpuWindow:
        return GpuWindow(self)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample_once()
            self._wake.wait(self.interval_s)
            self._wake.clear()

    def sample_once(self) -> None:
        """One state sample, and the compute processes when they are due."""
        if not self.probe():
            return
        t0 = time.monotonic()
        values = query_gpu(self.smi, self.fields, self.select)
        t = (t0 + time.monotonic()) / 2
        if values is not None:
            self._record(t, dict(zip(self.fields, values, strict=True)))
        if self._apps_due or t0 - self._last_apps_t >= self.apps_interval_s:
            self._apps_due, self._last_apps_t = False, t0
            self.sample_apps()

    def _record(self, t: float, raw: dict[str, str]) -> None:
        sample = Sample(t, {key: _number(raw.get(query)) for key, query in NUMERIC_FIELDS})
        pstate = parse_value(raw.get(PSTATE_FIELD, ""))
        sample.pstate = pstate if isinstance(pstate, str) else None
        for name in REASON_FIELDS:
            if raw.get(name) is not None:
                sample.reasons_mask = _mask(raw[name])
        with self._lock:
            self.samples.append(sample)

    def sample_apps(self) -> None:
        if not self.probe() or self._apps_select is None:
            return
        t0 = time.monotonic()
        rows = run_query(self.smi, [*self._apps_select, APPS_QUERY])
        if rows is None and self._apps_select:
            # This nvidia-smi takes no --id with the apps query: list every GPU's.
            rows = run_query(self.smi, [APPS_QUERY])
            if rows is not None:
                self._apps_select = []
        if rows is None:
            return
        apps = []
        for row in rows:
            pid = parse_value(row[0])
            if isinstance(pid, int):
                apps.append((pid, _number(row[1]) if len(row) > 1 else None))
        foreign = [pid for pid, _ in apps if not self._is_own(pid)]
        with self._lock:
            self.apps_samples.append(AppsSample((t0 + time.monotonic()) / 2, apps, foreign))

    def _is_own(self, pid: int) -> bool:
        if pid not in self._own:
            self._own[pid] = descends_from(pid, self.root_pid)
        return self._own[pid]

    def summary(self, since: float, until: float) -> dict | None:
        """min/median/max per field over [since, until], the non-zero clock event reasons
        seen and the foreign pids; None when nothing is sampled on this machine."""
        if not self.available:
            return None
        with self._lock:
            samples = [s for s in self.samples if since <= s.t <= until]
            apps = [a for a in self.apps_samples if since <= a.t <= until]
        out: dict = {"samples": len(samples)}
        for key, _ in NUMERIC_FIELDS:
            seen = [s.values[key] for s in samples if s.values.get(key) is not None]
            if seen:
                out[key] = {
                    "min": min(seen),
                    "median": statistics.median(seen),
                    "max": max(seen),
                }
        out["pstates"] = sorted({s.pstate for s in samples if s.pstate})
        masks = sorted({s.reasons_mask for s in samples if s.reasons_mask})
        out["clock_event_masks"] = [f"0x{m:016x}" for m in masks]
        out["clock_event_reasons"] = sorted({n for m in masks for n in reason_names(m)})
        out["apps_samples"] = len(apps)
        out["foreign_pids"] = sorted({pid for a in apps for pid in a.foreign})
        # In a container nvidia-smi may report host pids: when our own process never shows
        # up while it holds the GPU, "foreign" pids are ours seen from outside.
        out["own_pid_seen"] = any(self._own.get(pid, False) for a in apps for pid, _ in a.apps)
        return out


class GpuWindow:
    """One measured span; start()/stop() or `with`, then state() is its summary."""

    def __init__(self, sampler: GpuSampler) -> None:
        self.sampler = sampler
        self.since: float | None = None
        self.until: float | None = None

    def start(self) -> None:
        self.since = time.monotonic()
        self.sampler.wake()

    def stop(self) -> None:
        self.until = time.monotonic()

    def __enter__(self) -> GpuWindow:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def state(self) -> dict | None:
        if self.since is None:
            return None
        return self.sampler.summary(self.since, self.until or time.monotonic())


def _number(text: str | None) -> int | float | None:
    value = parse_value(text or "")
    return value if isinstance(value, int | float) else None


def _mask(text: str) -> int | None:
    try:
        return int(text.strip(), 16)
    except ValueError:
        return None
