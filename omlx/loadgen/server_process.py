"""Start a server (omlx or a peer such as mlx_lm.server) as a subprocess and wait for it."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def server_process(
    cmd: list[str],
    port: int,
    *,
    env: dict[str, str] | None = None,
    log_path: Path | None = None,
    ready_timeout_s: float = 300.0,
    ready_path: str = "/health",
) -> Iterator[str]:
    """Run cmd, wait until GET `ready_path` answers 200, yield the base URL, then stop it.

    `env` is the child's whole environment when given (default: this process's).
    `ready_path`: omlx's /ready waits for a preloaded default model; peers have /health.
    """
    log = open(log_path, "wb") if log_path else subprocess.DEVNULL  # noqa: SIM115
    proc = subprocess.Popen(
        cmd,
        env=dict(os.environ) if env is None else env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + ready_timeout_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{cmd[0]} exited with {proc.returncode} before it was ready")
            try:
                if httpx.get(f"{base}{ready_path}", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"{' '.join(cmd)} not ready after {ready_timeout_s:.0f} s")
            time.sleep(0.25)
        yield base
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        if log_path:
            log.close()  # type: ignore[union-attr]


def omlx_command(model_dir: Path, port: int) -> list[str]:
    """`omlx serve` for one model folder, as benchmarks start it."""
    return [sys.executable, "-m", "omlx.cli.main", "serve", "--model", str(model_dir),
            "--port", str(port)]  # fmt: skip


def mlx_lm_command(model_dir: Path, port: int) -> list[str]:
    """mlx-lm's own server, the first peer; it serves the model as "default_model"."""
    return [sys.executable, "-m", "mlx_lm", "server", "--model", str(model_dir),
            "--port", str(port)]  # fmt: skip


def run_facts() -> dict[str, str]:
    """Date, git revision and machine for a benchmark's result file."""
    git = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "git": git.stdout.strip(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
    }


def emit_json_line(record: dict, out: Path | None = None) -> None:
    """Print a benchmark's one-line JSON result; with `out`, append it there too."""
    line = json.dumps(record)
    print(line, flush=True)
    if out is not None:
        with out.open("a") as f:
            f.write(line + "\n")
