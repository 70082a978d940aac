"""The BLAS thread governor: every core while other processes leave the machine alone."""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path

import pytest

from omlx.platform import blas, blas_threads
from omlx.platform.blas_threads import (
    GROW_AFTER_SAMPLES,
    CpuSample,
    ThreadGovernor,
    others_busy_cores,
    read_sample,
    threads_for,
)


@pytest.mark.parametrize(
    ("others", "cores", "current", "expect"),
    [
        (0.05, 2, 1, 2),  # idle machine: both cores
        (0.05, 2, 2, 2),
        (0.2, 2, 1, 1),  # between the thresholds: keep what runs
        (0.2, 2, 2, 2),
        (0.5, 2, 2, 1),  # another process takes a core: back to one
        (1.9, 2, 2, 1),  # never below one
        (0.1, 8, 7, 8),
        (2.5, 8, 8, 5),
    ],
)
def test_threads_follow_the_others_load_with_hysteresis(others, cores, current, expect) -> None:
    assert threads_for(others, cores, current) == expect


def test_others_load_excludes_this_process() -> None:
    a = CpuSample(wall_s=0.0, machine_busy_s=10.0, own_s=4.0)
    b = CpuSample(wall_s=2.0, machine_busy_s=13.0, own_s=6.0)  # 3 s busy, 2 of them ours
    assert others_busy_cores(a, b) == pytest.approx(0.5)


def test_reads_proc_stat(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    stat.write_text("cpu  100 0 50 900 0 0 0 25 0 0\ncpu0 1 2 3\n")
    sample = read_sample(stat)
    # user + nice + system + irq + softirq + steal; idle and iowait are not busy.
    assert sample is not None
    assert sample.machine_busy_s == pytest.approx(175 / os.sysconf("SC_CLK_TCK"))
    assert read_sample(tmp_path / "missing") is None


def _governor(loads: list[float]) -> tuple[ThreadGovernor, list[int]]:
    """A governor fed samples in which other processes use `loads` cores per second."""
    applied: list[int] = []
    state = {"t": 0.0, "busy": 0.0}

    def sample() -> CpuSample:
        load = loads.pop(0) if loads else 0.0
        state["t"] += 1.0
        state["busy"] += load
        return CpuSample(wall_s=state["t"], machine_busy_s=state["busy"], own_s=0.0)

    gov = ThreadGovernor(applied.append, num_cores=2, current=1, sample=sample, background=False)
    return gov, applied


def test_governor_grows_after_calm_samples_and_backs_off_at_once() -> None:
    calm = [0.0] * GROW_AFTER_SAMPLES
    gov, applied = _governor([0.0, *calm, 0.9, 0.0, *calm])
    counts = [gov.step() for _ in range(2 * GROW_AFTER_SAMPLES + 3)]
    assert applied == [2, 1, 2]
    grown = counts.index(2)
    assert grown == GROW_AFTER_SAMPLES  # the first sample only sets the baseline
    assert counts[grown + 1] == 1  # one busy sample is enough to back off
    assert counts[grown + 2 : grown + 1 + GROW_AFTER_SAMPLES] == [1] * (GROW_AFTER_SAMPLES - 1)


def test_two_busy_engines_keep_a_core_for_each_other() -> None:
    gov, applied = _governor([0.0] * 20)
    gov.tick("a", busy=True)
    for _ in range(GROW_AFTER_SAMPLES + 1):
        gov.step()
    assert gov.current == 2
    gov.tick("b", busy=True)
    assert gov.step() == 1 and applied == [2, 1]
    gov.tick("b", busy=False)
    for _ in range(GROW_AFTER_SAMPLES):
        gov.step()
    assert applied == [2, 1, 2]


def test_no_governor_when_the_user_chose_the_thread_count(monkeypatch) -> None:
    monkeypatch.delenv(blas.ENV_AUTO_THREADS, raising=False)
    assert blas.thread_control() is None
    env = blas.preload_env(
        {"OPENBLAS_NUM_THREADS": "3"}, blas.BlasPlan("/x/libopenblas.so.0", "test")
    )
    assert blas.ENV_AUTO_THREADS not in env and env["OPENBLAS_NUM_THREADS"] == "3"
    env = blas.preload_env({}, blas.BlasPlan("/x/libopenblas.so.0", "test"))
    assert env[blas.ENV_AUTO_THREADS] == "1"


def test_first_switch_is_logged_at_info_later_ones_at_debug(caplog) -> None:
    calm = [0.0] * GROW_AFTER_SAMPLES
    gov, applied = _governor([0.0, *calm, 0.9, 0.0, *calm])
    with caplog.at_level(logging.DEBUG, logger="omlx.platform.blas_threads"):
        for _ in range(2 * GROW_AFTER_SAMPLES + 3):
            gov.step()
    switches = [r for r in caplog.records if "BLAS threads" in r.getMessage()]
    assert applied == [2, 1, 2]
    assert [r.levelno for r in switches] == [logging.INFO, logging.DEBUG, logging.DEBUG]


def test_a_batch_job_starts_sampling_without_an_engine_tick(monkeypatch) -> None:
    """`omlx draft train` has no engine loop: start() alone lets the count grow."""
    monkeypatch.setattr(blas_threads, "SAMPLE_EVERY_S", 0.01)
    samples = iter([0.0] * 100)
    applied: list[int] = []
    t = {"wall": 0.0, "busy": 0.0}

    def sample() -> CpuSample:
        t["wall"] += 0.01
        t["busy"] += 0.01 * next(samples)
        return CpuSample(wall_s=t["wall"], machine_busy_s=t["busy"], own_s=0.0)

    gov = ThreadGovernor(applied.append, num_cores=2, current=1, sample=sample)
    gov.start()
    gov.start()  # idempotent: one sampling thread
    assert gov._thread is not None and gov._thread.is_alive()
    threads = [th for th in threading.enumerate() if th.name == "omlx-blas-threads"]
    assert threads.count(gov._thread) == 1
    deadline = time.monotonic() + 10.0
    while not applied and time.monotonic() < deadline:
        time.sleep(0.05)
    assert applied == [2]
