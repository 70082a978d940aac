"""The engine's step trace over one benchmark level: the trace rows the level covered, the
CPU its engine and event-loop threads spent (Linux /proc), and their breakdown per step
and per token. serving_scale.py reads it for `--trace`."""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path

from omlx.loadgen.percentiles import percentile


def rounded(x: float | None, n: int) -> float | None:
    return None if x is None else round(x, n)


def thread_cpu_s(pid: int, tid: int) -> float | None:
    """User+system CPU seconds of one thread (Linux /proc), None where unreadable."""
    try:
        fields = Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class TraceWindow:
    """CPU of the engine and event-loop threads over one level, and the trace rows in it."""

    def __init__(self, trace_path: Path) -> None:
        self.path = trace_path
        # The trace's meta line names the process and its engine thread; the event loop
        # runs on the process's main thread (tid = pid), in process and in `omlx serve`.
        self.pid: int | None = None
        self.engine_tid: int | None = None
        # With `server.engine_process` the engines run in a child of `omlx serve`; its
        # front end's event loop is then the parent's main thread.
        self.front_pid: int | None = None

    def __enter__(self) -> TraceWindow:
        self.t0 = time.monotonic()
        self.cpu0 = self._cpu()
        return self

    def __exit__(self, *exc) -> None:
        self.t1 = time.monotonic()
        self.cpu1 = self._cpu()

    def _cpu(self) -> tuple[float | None, float | None, float | None]:
        if self.engine_tid is None:
            self._read_meta()
        if self.pid is None or self.engine_tid is None:
            return None, None, None
        front = thread_cpu_s(self.front_pid, self.front_pid) if self.front_pid else None
        return thread_cpu_s(self.pid, self.engine_tid), thread_cpu_s(self.pid, self.pid), front

    def _read_meta(self) -> None:
        with contextlib.suppress(OSError):
            for line in self.path.read_text().splitlines():
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:  # the server is still writing this line
                    break
                if row.get("kind") == "meta":
                    self.pid, self.engine_tid = row["pid"], row["engine_tid"]
        if self.pid is not None:
            with contextlib.suppress(OSError):
                if b"omlx.enginehost.host" in Path(f"/proc/{self.pid}/cmdline").read_bytes():
                    stat = Path(f"/proc/{self.pid}/stat").read_text()
                    self.front_pid = int(stat.rsplit(")", 1)[1].split()[1])

    def breakdown(self, tokens: int, wait_s: float = 60.0) -> dict:
        """The level's rows, once the engine went idle after it (it may still be storing
        finished sequences when the last client has its answer)."""
        deadline = time.monotonic() + wait_s
        while True:
            rows, idle = [], False
            with contextlib.suppress(OSError):
                for line in self.path.read_text().splitlines():
                    row = json.loads(line)
                    if row.get("kind") == "step" and self.t0 <= row["t"]:
                        rows.append(row)
                    idle = idle or (row.get("kind") == "idle" and row["t"] >= self.t1)
            if idle or time.monotonic() > deadline:
                break
            time.sleep(0.25)
        return step_breakdown(rows, tokens, self.cpu0, self.cpu1)


def step_breakdown(rows: list[dict], tokens: int, cpu0, cpu1) -> dict:
    """Means over the level's engine steps, in ms; CPU per generated token in µs."""
    if not rows:
        return {}

    def mean(key: str) -> float:
        return round(1000 * sum(r.get(key, 0.0) for r in rows) / len(rows), 3)

    decode_rows = [r for r in rows if r["decoding"] and not r["prompt_tokens"]]
    lags = [x * 1000 for r in rows for x in r.get("lags_s", [])]
    waits = [x for r in rows for x in r.get("admit_waits_s", [])]
    prepares = [x for r in rows for x in r.get("prepare_s", [])]
    firsts = [x for r in rows for x in r.get("first_token_s", [])]
    out = {
        "steps": len(rows),
        "mean_batch": round(sum(r["decoding"] for r in rows) / len(rows), 1),
        "tick_ms": mean("tick_s"),
        "step_ms": mean("step_s"),
        "sync_ms": mean("sync_s"),
        "host_in_step_ms": round(mean("step_s") - mean("sync_s"), 3),
        "prefill_ms": mean("prefill_s"),
        "drain_admit_ms": mean("admit_s"),
        "publish_ms": mean("publish_s"),
        "flush_ms": mean("flush_s"),
        "store_ms": mean("store_s"),
        # Totals: admission (prefix-cache fetches) and stores come in bursts a mean hides.
        "admit_total_s": round(sum(r["admit_s"] for r in rows), 3),
        "store_total_s": round(sum(r["store_s"] for r in rows), 3),
        # Python's collector holding the GIL (engine.freeze_gc keeps full passes short).
        "gc_total_s": round(sum(r.get("gc_s", 0.0) for r in rows), 3),
        "gc_max_step_ms": round(1000 * max(r.get("gc_s", 0.0) for r in rows), 2),
        "gc_full_passes": sum(1 for r in rows if r.get("gc_gen", -1) == 2),
        "prefill_steps": sum(1 for r in rows if r["prompt_tokens"]),
        "decode_only_step_ms": round(
            1000 * sum(r["step_s"] for r in decode_rows) / len(decode_rows), 3
        )
        if decode_rows
        else None,
        "handoff_lag_p50_ms": rounded(percentile(lags, 50), 2),
        "handoff_lag_p95_ms": rounded(percentile(lags, 95), 2),
        "admit_wait_p50_s": rounded(percentile(waits, 50), 3),
        "admit_wait_p95_s": rounded(percentile(waits, 95), 3),
        "prepare_p50_s": rounded(percentile(prepares, 50), 3),
        "prepare_p95_s": rounded(percentile(prepares, 95), 3),
        "engine_ttft_p50_s": rounded(percentile(firsts, 50), 3),
        "engine_ttft_p95_s": rounded(percentile(firsts, 95), 3),
    }
    (e0, l0, f0), (e1, l1, f1) = cpu0, cpu1
    if tokens and e0 is not None and e1 is not None:
        out["engine_cpu_us_per_token"] = round(1e6 * (e1 - e0) / tokens, 1)
    if tokens and l0 is not None and l1 is not None:
        out["loop_cpu_us_per_token"] = round(1e6 * (l1 - l0) / tokens, 1)
    if tokens and f0 is not None and f1 is not None:  # the engine process's front end
        out["front_loop_cpu_us_per_token"] = round(1e6 * (f1 - f0) / tokens, 1)
    return out
