"""benchmarks/gpu_state.py against a fake nvidia-smi that prints what a real one prints."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

MODULE = Path(__file__).parents[3] / "benchmarks" / "gpu_state.py"


def _load_gpu_state():
    # benchmarks/ is no package: load the module from its file, as the scripts find it.
    spec = importlib.util.spec_from_file_location("gpu_state", MODULE)
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_state"] = module
    spec.loader.exec_module(module)
    return module


gpu_state = _load_gpu_state()

# A fake `nvidia-smi`: answers --query-gpu from identity.json and state.json (the test
# rewrites state.json between samples), --query-compute-apps from apps.json, rejects
# fields it does not know as nvidia-smi does, and logs every call's arguments.
FAKE_SMI = r"""
import json, os, sys
here = os.path.dirname(os.path.abspath(__file__))
def load(name):
    with open(os.path.join(here, name)) as f:
        return json.load(f)
with open(os.path.join(here, "calls.jsonl"), "a") as f:
    f.write(json.dumps(sys.argv[1:]) + "\n")
mode = load("mode.json")
if mode == "broken":
    print("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.")
    sys.exit(9)
known = {**load("identity.json"), **load("state.json")}
if mode == "old":  # a driver before R535: the bitmask has its older name only
    known["clocks_throttle_reasons.active"] = known.pop("clocks_event_reasons.active")
for arg in sys.argv[1:]:
    if arg.startswith("--query-gpu="):
        fields = arg.split("=", 1)[1].split(",")
        for name in fields:
            if name not in known:
                print(f'Field "{name}" is not a valid field to query.')
                sys.exit(2)
        print(", ".join(str(known[name]) for name in fields))
    elif arg.startswith("--query-compute-apps="):
        for pid, used in load("apps.json"):
            print(f"{pid}, {used}")
"""

IDENTITY = {
    "index": 0,
    "name": "NVIDIA H100 80GB HBM3",
    "driver_version": "550.90.07",
    "memory.total": 81559,
    "persistence_mode": "Enabled",
    "mig.mode.current": "[N/A]",
    "compute_mode": "Default",
    "clocks.max.sm": 1980,
    "clocks.max.memory": 2619,
    "power.limit": "700.00",
    "uuid": "GPU-5d7a1c2e-0b7f-3c1a-9d2e-8f4b6a1c0e11",
    "pci.bus_id": "00000000:19:00.0",
}


def state(sm: int, power: str = "350.12", reasons: str = "0x0000000000000000") -> dict:
    return {
        "clocks.sm": sm,
        "clocks.mem": 2619,
        "power.draw": power,
        "temperature.gpu": 41,
        "utilization.gpu": 100,
        "memory.used": 40213,
        "pstate": "P0",
        "clocks_event_reasons.active": reasons,
    }


class FakeSmi:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.set_mode("new")
        self.write("identity.json", IDENTITY)
        self.set_state(state(1980))
        self.set_apps([])
        script = folder / "nvidia-smi"
        script.write_text(f"#!{sys.executable} -S\n{FAKE_SMI}")
        script.chmod(0o755)

    def write(self, name: str, value: object) -> None:
        (self.folder / name).write_text(json.dumps(value))

    def set_mode(self, mode: str) -> None:
        self.write("mode.json", mode)

    def set_state(self, values: dict) -> None:
        self.write("state.json", values)

    def set_apps(self, apps: list[tuple[int, object]]) -> None:
        self.write("apps.json", apps)

    def calls(self) -> list[list[str]]:
        log = self.folder / "calls.jsonl"
        return [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []


@pytest.fixture
def smi(tmp_path, monkeypatch) -> FakeSmi:
    folder = tmp_path / "bin"
    folder.mkdir()
    fake = FakeSmi(folder)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return fake


def test_identity_reads_the_card_and_its_settings(smi):
    identity = gpu_state.gpu_identity()
    assert identity == {
        "name": "NVIDIA H100 80GB HBM3",
        "driver_version": "550.90.07",
        "memory_total_mib": 81559,
        "persistence_mode": "Enabled",
        "mig_mode": None,  # "[N/A]"
        "compute_mode": "Default",
        "max_sm_clock_mhz": 1980,
        "max_mem_clock_mhz": 2619,
        "power_limit_w": 700.0,
        "uuid": "GPU-5d7a1c2e-0b7f-3c1a-9d2e-8f4b6a1c0e11",
        "pci_bus_id": "00000000:19:00.0",
    }
    assert all("--id=0" in call for call in smi.calls())


def test_identity_asks_for_the_gpu_cuda_makes_visible(smi, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1")
    assert gpu_state.gpu_identity() is not None
    assert all("--id=3" in call for call in smi.calls())


def test_window_summary_is_min_median_max_of_the_samples_inside_it(smi):
    sampler = gpu_state.GpuSampler()
    smi.set_state(state(300, reasons="0x0000000000000008"))  # before the window
    sampler.sample_once()
    since = time.monotonic()
    smi.set_state(state(1410, power="[N/A]", reasons="0x0000000000000004"))
    sampler.sample_once()
    smi.set_state(state(1980, power="700.00"))
    sampler.sample_once()
    smi.set_state(state(1755, power="650.50", reasons="0x0000000000000044"))
    sampler.sample_once()
    until = time.monotonic()
    smi.set_state(state(2100))  # after it
    sampler.sample_once()

    summary = sampler.summary(since, until)
    assert summary["samples"] == 3
    assert summary["sm_clock_mhz"] == {"min": 1410, "median": 1755, "max": 1980}
    # "[N/A]" is no reading: the median of the two that were read.
    assert summary["power_w"] == {"min": 650.5, "median": 675.25, "max": 700.0}
    assert summary["temp_c"] == {"min": 41, "median": 41, "max": 41}
    assert summary["pstates"] == ["P0"]
    assert summary["clock_event_masks"] == ["0x0000000000000004", "0x0000000000000044"]
    assert summary["clock_event_reasons"] == ["hw_thermal_slowdown", "sw_power_cap"]
    assert sampler.summary(until, time.monotonic())["sm_clock_mhz"]["max"] == 2100


def test_each_sample_is_one_call_once_the_fields_are_settled(smi):
    sampler = gpu_state.GpuSampler(apps_interval_s=3600)
    sampler.sample_once()  # probes, samples, and lists the processes (first time due)
    before = len(smi.calls())
    for _ in range(3):
        sampler.sample_once()
    assert len(smi.calls()) - before == 3
    assert len(sampler.samples) == 4


def test_an_older_driver_reports_throttle_reasons_under_their_old_name(smi):
    smi.set_mode("old")
    sampler = gpu_state.GpuSampler()
    since = time.monotonic()
    smi.set_state(state(1410, reasons="0x0000000000000004"))
    sampler.sample_once()
    assert "clocks_throttle_reasons.active" in sampler.fields
    assert "clocks_event_reasons.active" not in sampler.fields
    summary = sampler.summary(since, time.monotonic())
    assert summary["sm_clock_mhz"]["max"] == 1410
    assert summary["clock_event_reasons"] == ["sw_power_cap"]


def test_a_process_that_is_not_ours_marks_the_gpu_shared(smi):
    # A grandchild, as `omlx serve`'s engine process is to the benchmark.
    shell = subprocess.Popen(
        ["sh", "-c", "sleep 30 & echo $!; wait"], stdout=subprocess.PIPE, text=True
    )
    try:
        grandchild = int(shell.stdout.readline())
        tenant = os.getppid()  # alive, and no descendant of this test
        hidden = 4_194_303  # above pid_max: a pid from another namespace
        smi.set_apps([(os.getpid(), 1024), (grandchild, 2048), (tenant, 512), (hidden, "[N/A]")])
        sampler = gpu_state.GpuSampler(apps_interval_s=0)
        sampler.sample_once()
        since = time.monotonic()
        smi.set_apps([(os.getpid(), 1024)])
        sampler.sample_once()
        until = time.monotonic()
    finally:
        shell.kill()
        shell.wait()
    everything = sampler.summary(0, until)
    assert everything["foreign_pids"] == sorted([tenant, hidden])
    assert everything["own_pid_seen"] is True
    assert sampler.apps_samples[0].apps[3] == (hidden, None)
    later = sampler.summary(since, until)
    assert later["apps_samples"] == 1
    assert later["foreign_pids"] == []


def test_the_background_thread_samples_until_stopped(smi):
    with gpu_state.GpuSampler(interval_s=0.02) as sampler:
        deadline = time.monotonic() + 10
        while len(sampler.samples) < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        with sampler.window() as window:
            time.sleep(0.3)
    assert not sampler.is_running
    assert len(sampler.samples) >= 3
    state_ = window.state()
    assert state_["samples"] >= 1
    assert state_["apps_samples"] >= 1  # the window's start asked for the processes too
    count = len(sampler.samples)
    time.sleep(0.1)
    assert len(sampler.samples) == count


@pytest.mark.parametrize("setup", ["absent", "broken"])
def test_without_a_working_nvidia_smi_everything_is_none(smi, tmp_path, monkeypatch, setup):
    if setup == "absent":
        empty = tmp_path / "empty"
        empty.mkdir()
        monkeypatch.setenv("PATH", str(empty))
    else:
        smi.set_mode("broken")
    assert gpu_state.gpu_identity() is None
    sampler = gpu_state.GpuSampler(interval_s=0.01)
    with sampler:
        assert not sampler.is_running
        with sampler.window() as window:
            sampler.sample_once()
    assert sampler.samples == []
    assert sampler.summary(0, time.monotonic()) is None
    assert window.state() is None
    if setup == "absent":
        assert smi.calls() == []


def test_imports_no_mlx():
    # The sampler runs beside MLX in the benchmarks but must not need it (CPU-only hosts).
    code = (
        "import sys; sys.modules['mlx'] = None; "
        f"sys.path.insert(0, {str(MODULE.parent)!r}); import gpu_state"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
