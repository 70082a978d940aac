"""kill -9 a real server while its cold tier writes blocks, many times, then restart:
no tmp file survives, the index matches the files, no block failing its checksum is used,
and the answers equal a cold run's."""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from omlx.cache.cold_format import SUFFIX, TMP_SUFFIX, BadBlockFile, read_header
from omlx.cache.cold_store import read_block
from omlx.loadgen.server_process import free_port

ROOT = Path(__file__).resolve().parents[2]
FILLER = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi "


def _prompt(round_: int, i: int) -> str:
    # A shared head of several blocks (read back from the cold tier by later prompts),
    # then a tail of new blocks to write.
    return FILLER * 6 + f"Document {round_}-{i}: " + " ".join(FILLER.split()[i % 7 :] * 2)


@contextlib.contextmanager
def _server(model: Path, cold: Path, marker: Path | None = None) -> Iterator[tuple[str, Any]]:
    port = free_port()
    cmd = [sys.executable, "-m", "tests.fixtures.crash_server", str(model), str(cold), str(port)]
    if marker is not None:
        cmd.append(str(marker))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, "server exited during start-up"
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{base}/health", timeout=1).status_code == 200:
                    break
            assert time.monotonic() < deadline, "server not healthy"
            time.sleep(0.05)
        yield base, proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        proc.wait(30)


def _ask(base: str, text: str, timeout: float = 120) -> str:
    body = {"model": "tiny", "messages": [{"role": "user", "content": text}],
            "max_tokens": 6, "temperature": 0}  # fmt: skip
    r = httpx.post(f"{base}/v1/chat/completions", json=body, timeout=timeout)
    r.raise_for_status()
    return r.json()["choices"][0]["message"]["content"]


def _keep_asking(base: str, round_: int, stop: threading.Event, sent: list[str]) -> None:
    for i in range(1000):
        if stop.is_set():
            return
        sent.append(_prompt(round_, i))
        try:
            _ask(base, _prompt(round_, i), timeout=30)
        except httpx.HTTPError:
            return  # the server was killed


def _files(cold: Path, suffix: str) -> list[Path]:
    return sorted(p for p in cold.glob(f"*/*{suffix}"))


def _crash_rounds(model: Path, cold: Path, rounds: int, sent: list[str]) -> dict[str, int]:
    marker = cold.parent / "inside-write"
    figures = {"rounds": rounds, "kills_inside_writes": 0, "orphaned_tmp_files_seen": 0}
    rng = random.Random(0)
    for round_ in range(rounds):
        marker.unlink(missing_ok=True)
        with _server(model, cold, marker) as (base, proc):
            stop = threading.Event()
            asker = threading.Thread(
                target=_keep_asking, args=(base, round_, stop, sent), daemon=True
            )
            asker.start()
            # Let a random number of writes finish first, then kill inside the next one.
            skip = rng.randrange(0, 4)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                if marker.exists():
                    if skip == 0:
                        os.kill(proc.pid, signal.SIGKILL)
                        break
                    skip -= 1
                    while marker.exists():
                        time.sleep(0.001)
                time.sleep(0.001)
            proc.wait(30)
            stop.set()
            asker.join(60)
        # The killed writer could not remove its marker: the kill fell inside its write.
        figures["kills_inside_writes"] += marker.exists()
        figures["orphaned_tmp_files_seen"] = max(
            figures["orphaned_tmp_files_seen"], len(_files(cold, TMP_SUFFIX))
        )
    return figures


def _corrupt_every_other_block(cold: Path) -> int:
    """Garbage over the tensor bytes of half the block files (headers intact)."""
    corrupted = 0
    for path in _files(cold, SUFFIX)[::2]:
        data = bytearray(path.read_bytes())
        start = 8 + int.from_bytes(data[:8], "little")  # safetensors: length, JSON, tensors
        data[start:] = os.urandom(len(data) - start)
        path.write_bytes(bytes(data))
        corrupted += 1
    return corrupted


def _checked(cold: Path) -> tuple[int, int]:
    """(files whose header is valid, files that fail their checksum)."""
    valid = corrupt = 0
    for path in _files(cold, SUFFIX):
        try:
            read_header(path)
        except BadBlockFile:
            continue
        valid += 1
        try:
            read_block(path)
        except BadBlockFile:
            corrupt += 1
    return valid, corrupt


def _cold_blocks(base: str) -> int:
    report = httpx.get(f"{base}/api/cache/stats").json()
    return sum(m["cold"]["blocks"] for m in report["models"])


def _settle(cold: Path) -> None:
    """Wait until the cold writer of a running server stops adding files."""
    last, stable_since = -1, time.monotonic()
    while time.monotonic() - stable_since < 1.0:
        count = len(_files(cold, SUFFIX))
        if count != last:
            last, stable_since = count, time.monotonic()
        time.sleep(0.1)


def _run(tiny_llama_dir: Path, tmp_path: Path, rounds: int) -> dict[str, int]:
    cold = tmp_path / "cold"
    prompts: list[str] = []  # every prompt sent before a kill: later runs ask them all
    figures = _crash_rounds(tiny_llama_dir, cold, rounds, prompts)
    assert figures["kills_inside_writes"] >= rounds - 1, figures  # the last may miss
    with _server(tiny_llama_dir, cold) as (base, proc):
        assert _files(cold, TMP_SUFFIX) == [], "a dead writer's tmp file survived the restart"
        assert _cold_blocks(base) == _checked(cold)[0]  # the index is the files, no more
        first = [_ask(base, p) for p in prompts]
        _settle(cold)
        os.kill(proc.pid, signal.SIGKILL)
    figures["corrupt_blocks_planted"] = _corrupt_every_other_block(cold)
    valid, corrupt = _checked(cold)
    with _server(tiny_llama_dir, cold) as (base, _):
        assert _cold_blocks(base) == valid
        warm = [_ask(base, p) for p in prompts]
        skipped = httpx.get(f"{base}/api/cache/stats").json()["skipped_files"]
    with _server(tiny_llama_dir, tmp_path / "empty-cold") as (base, _):
        cold_run = [_ask(base, p) for p in prompts]
    # Nothing read from a damaged block reached an answer.
    assert first == warm == cold_run
    _, left_corrupt = _checked(cold)
    figures.update(
        corrupt_on_disk=corrupt,
        corrupt_detected_and_dropped=skipped,
        corrupt_blocks_used=0,
        corrupt_left_unread=left_corrupt,
    )
    assert skipped + left_corrupt == corrupt  # each bad block was caught or never touched
    print("crash rounds:", json.dumps(figures))
    return figures


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_kill_inside_cold_writes_then_restart(tiny_llama_dir: Path, tmp_path: Path) -> None:
    figures = _run(tiny_llama_dir, tmp_path, rounds=2)
    assert figures["corrupt_detected_and_dropped"] > 0


@pytest.mark.soak
@pytest.mark.timeout(1800)
def test_kill_inside_cold_writes_many_rounds(tiny_llama_dir: Path, tmp_path: Path) -> None:
    figures = _run(tiny_llama_dir, tmp_path, rounds=24)
    assert figures["kills_inside_writes"] >= 20
    assert figures["corrupt_detected_and_dropped"] > 0
