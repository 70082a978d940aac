"""`omlx serve` with its models in an engine process (`server.engine_process = "on"`):
the same answers as in process through the official clients, admin calls and cache
routes across the process boundary, a killed engine process reported and replaced, and
no process left behind however the server stops."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import anthropic
import httpx
import openai
import pytest

from omlx.loadgen.server_process import free_port
from tests.fixtures.background_stream import stream_in_background
from tests.fixtures.tiny_encoders import build_tiny_bert
from tests.fixtures.tiny_tokenizer import EOS_TOKEN, tokenizer_vocab

pytestmark = pytest.mark.timeout(180)
PROMPT = [{"role": "user", "content": "tell me about rivers"}]


@dataclass
class Served:
    proc: subprocess.Popen[str]
    base_url: str
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text()

    def engine_pid(self) -> int:
        """The engine process: the server's one child running omlx.enginehost.host."""
        children = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            with contextlib.suppress(OSError):
                fields = stat.read_text().rsplit(")", 1)[1].split()
                if int(fields[1]) == self.proc.pid and fields[0] != "Z":
                    children.append(int(stat.parent.name))
        for pid in children:
            with contextlib.suppress(OSError):
                if b"omlx.enginehost.host" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    return pid
        raise AssertionError(f"no engine process among {children!r}")


def _models(tmp_path: Path, tiny_llama_dir: Path) -> Path:
    models = tmp_path / "models"
    shutil.copytree(tiny_llama_dir, models / "tiny")
    build_tiny_bert(models / "tiny-bert")
    return models


@contextlib.contextmanager
def serving(models: Path, tmp_path: Path, mode: str) -> Iterator[Served]:
    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    log_path = tmp_path / f"serve-{mode}-{port}.log"
    cmd = [sys.executable, "-m", "omlx.cli.main", "serve", "--model-dir", str(models),
           "--model", "tiny", "--port", str(port)]  # fmt: skip
    env = dict(os.environ, OMLX_SERVER__ENGINE_PROCESS=mode)
    with log_path.open("w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, text=True, env=env)
    served = Served(proc, base_url, log_path)
    try:
        deadline = time.monotonic() + 90
        while True:
            assert proc.poll() is None, served.log()
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{base_url}/health", timeout=1).status_code == 200:
                    break
            assert time.monotonic() < deadline, "omlx serve did not become healthy"
            time.sleep(0.1)
        yield served
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _ask(base_url: str) -> tuple[str, str, int]:
    """(streamed text, non-streamed text, streamed completion tokens), greedy."""
    client = openai.OpenAI(base_url=f"{base_url}/v1", api_key="x", max_retries=0)
    streamed, usage = "", None
    for chunk in client.chat.completions.create(
        model="tiny", messages=PROMPT, max_tokens=24, temperature=0, stream=True,
        stream_options={"include_usage": True},
    ):  # fmt: skip
        if chunk.choices:
            streamed += chunk.choices[0].delta.content or ""
        if chunk.usage is not None:
            usage = chunk.usage
    whole = client.chat.completions.create(
        model="tiny", messages=PROMPT, max_tokens=24, temperature=0
    )
    assert usage is not None
    return streamed, whole.choices[0].message.content or "", usage.completion_tokens


def _ask_claude(base_url: str) -> tuple[str, int]:
    """(streamed text, output tokens) of a greedy Anthropic Messages request."""
    claude = anthropic.Anthropic(base_url=base_url, api_key="x", max_retries=0)
    events = claude.messages.create(
        model="tiny", max_tokens=24, messages=PROMPT, stream=True,
        extra_body={"temperature": 0.0},
    )  # fmt: skip
    text, output_tokens = "", 0
    for event in events:
        if event.type == "content_block_delta" and event.delta.type == "text_delta":
            text += event.delta.text
        elif event.type == "message_delta":
            output_tokens = event.usage.output_tokens
    return text, output_tokens


def _gone(pid: int, within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        # A zombie (exited, not yet reaped by its parent) counts as gone.
        with contextlib.suppress(FileNotFoundError):
            if Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z":
                return True
        time.sleep(0.1)
    return False


def test_the_engine_process_answers_as_the_in_process_server_does(
    tmp_path: Path, tiny_llama_dir: Path
) -> None:
    models = _models(tmp_path, tiny_llama_dir)
    with serving(models, tmp_path, "off") as local:
        expected = _ask(local.base_url)
        claude_expected = _ask_claude(local.base_url)
        assert claude_expected[0] and claude_expected[1] == 24
        with pytest.raises(AssertionError, match="no engine process"):
            local.engine_pid()
    with serving(models, tmp_path, "on") as split:
        engine = split.engine_pid()
        assert _ask(split.base_url) == expected
        assert expected[0] and expected[2] == 24

        # Anthropic's client, streamed, through the same engine process.
        assert _ask_claude(split.base_url) == claude_expected

        # Errors keep their API format and status across the boundary.
        client = openai.OpenAI(base_url=f"{split.base_url}/v1", api_key="x", max_retries=0)
        with pytest.raises(openai.NotFoundError, match="no-such-model"):
            client.chat.completions.create(model="no-such-model", messages=PROMPT, max_tokens=4)
        too_long = [{"role": "user", "content": "river " * 20_000}]
        with pytest.raises(openai.BadRequestError, match="context"):
            client.chat.completions.create(model="tiny", messages=too_long, max_tokens=4)

        # Embeddings: another model type, loaded and run in the engine process.
        emb = client.embeddings.create(model="tiny-bert", input=["a river", "the sea"])
        assert len(emb.data) == 2 and len(emb.data[0].embedding) > 0

        # Admin calls: unload, pin, and the status the synchronous routes answer from.
        r = httpx.post(f"{split.base_url}/v1/models/tiny-bert/unload", timeout=30)
        assert r.status_code == 200 and r.json()["state"] == "available", r.text
        r = httpx.post(f"{split.base_url}/v1/models/tiny/pin", timeout=30)
        assert r.json()["pinned"] is True
        status = httpx.get(f"{split.base_url}/v1/models/status", timeout=5).json()
        rows = {m["id"]: m for m in status["data"]}
        assert rows["tiny"]["state"] == "loaded" and rows["tiny"]["pinned"] is True
        assert rows["tiny-bert"]["state"] == "available"
        assert httpx.get(f"{split.base_url}/ready", timeout=5).status_code == 200

        # Stats are pushed by the engine process: within a second they count every request.
        deadline = time.monotonic() + 5
        while True:
            stats = httpx.get(f"{split.base_url}/api/stats", timeout=5).json()
            tiny = next(m for m in stats["models"] if m["model"] == "tiny")
            if tiny["requests_total"] >= 3 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert tiny["requests_total"] == 3  # two OpenAI, one Anthropic (the 400 never ran)
        assert stats["memory"]["process_rss_bytes"] > 0  # the engine process's memory

        # The KV cache lives in the engine process; its routes reach it.
        report = httpx.get(f"{split.base_url}/api/cache/stats", timeout=10).json()
        assert any(m["model"] == "tiny" and m["hot"]["blocks"] > 0 for m in report["models"])
        cleared = httpx.post(f"{split.base_url}/api/cache/clear", timeout=10)
        assert cleared.status_code == 200 and cleared.json() > 0
        assert engine == split.engine_pid()  # one engine process served all of it

        # Its log lines reach the server's log (console and the admin's log view).
        split.proc.send_signal(signal.SIGTERM)
        assert split.proc.wait(60) == 0
        assert _gone(engine, 10), "the engine process outlived the server"
    log = split.log()
    assert "MLX BLAS: " in log and "omlx.enginehost.build" in log
    assert "engine process" in log and "Traceback" not in log


def test_a_killed_engine_process_fails_its_streams_with_503_and_comes_back(
    tmp_path: Path, tiny_llama_dir: Path
) -> None:
    models = _models(tmp_path, tiny_llama_dir)
    body = {"model": "tiny", "messages": PROMPT, "max_tokens": 2000, "stream": True,
            "logit_bias": {str(tokenizer_vocab()[EOS_TOKEN]): -100}}  # fmt: skip
    with serving(models, tmp_path, "on") as split:
        first = split.engine_pid()
        reader, lines = stream_in_background(split.base_url, body)
        os.kill(first, signal.SIGKILL)
        reader.join(30)
        assert not reader.is_alive(), "the stream hung after its engine process died"
        errors = [json.loads(line[6:]) for line in lines if line.startswith('data: {"error')]
        assert errors and "engine process exited" in errors[0]["error"]["message"]

        # While it restarts, requests are refused as overloaded, with a Retry-After.
        r = httpx.post(f"{split.base_url}/v1/chat/completions", json={**body, "stream": False,
                       "max_tokens": 4}, timeout=30)  # fmt: skip
        if r.status_code != 200:
            assert r.status_code == 503 and r.headers.get("retry-after"), r.text
            assert r.json()["error"]["type"] == "overloaded_error"
        deadline = time.monotonic() + 60
        while True:
            r = httpx.post(f"{split.base_url}/v1/chat/completions", json={**body, "stream": False,
                           "max_tokens": 4}, timeout=30)  # fmt: skip
            if r.status_code == 200 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert r.status_code == 200, r.text
        assert r.json()["usage"]["completion_tokens"] == 4
        assert split.engine_pid() != first
    assert "the engine process exited" in split.log()


def test_a_killed_server_takes_its_engine_process_along(
    tmp_path: Path, tiny_llama_dir: Path
) -> None:
    models = _models(tmp_path, tiny_llama_dir)
    with serving(models, tmp_path, "on") as split:
        engine = split.engine_pid()
        split.proc.kill()  # no shutdown at all: the engine process sees its socket close
        split.proc.wait(10)
        assert _gone(engine, 30), "the engine process outlived a killed server"


def test_ctrl_c_to_the_process_group_lets_the_open_stream_finish(
    tmp_path: Path, tiny_llama_dir: Path
) -> None:
    """SIGINT reaches the server and its engine process alike (a terminal's Ctrl-C); the
    engine process ignores it and the server drains its streams before closing it."""
    models = _models(tmp_path, tiny_llama_dir)
    body = {"model": "tiny", "messages": PROMPT, "max_tokens": 150, "stream": True,
            "logit_bias": {str(tokenizer_vocab()[EOS_TOKEN]): -100}}  # fmt: skip
    with serving(models, tmp_path, "on") as split:
        engine = split.engine_pid()
        reader, lines = stream_in_background(split.base_url, body)
        split.proc.send_signal(signal.SIGINT)
        os.kill(engine, signal.SIGINT)
        reader.join(60)
        assert lines[-1] == "data: [DONE]"
        assert any('"finish_reason":"length"' in line for line in lines)
        assert split.proc.wait(30) == 0
        assert _gone(engine, 10)
    assert "Traceback" not in split.log()


def test_a_client_leaving_frees_its_row_in_the_engine_process(
    tmp_path: Path, tiny_llama_dir: Path
) -> None:
    """A disconnect cancels the request across the boundary: the engine stops decoding
    it (the pushed stats show nothing running) and the next request is served."""
    models = _models(tmp_path, tiny_llama_dir)
    body = {"model": "tiny", "messages": PROMPT, "max_tokens": 5000, "stream": True,
            "logit_bias": {str(tokenizer_vocab()[EOS_TOKEN]): -100}}  # fmt: skip
    with serving(models, tmp_path, "on") as split:
        url = f"{split.base_url}/v1/chat/completions"
        for _ in range(3):
            with httpx.stream("POST", url, json=body, timeout=60) as r:
                chunks = 0
                for line in r.iter_lines():
                    chunks += line.startswith("data: ")
                    if chunks >= 5:
                        break  # leave mid-stream
        deadline = time.monotonic() + 10
        while True:
            # Pushed state can predate the last request (it is pushed 50 ms after a start,
            # and five chunks may come sooner): wait until it has counted all three.
            stats = httpx.get(f"{split.base_url}/api/stats", timeout=5).json()
            tiny = next(m for m in stats["models"] if m["model"] == "tiny")
            idle = stats["running"] == 0 and stats["queued"] == 0
            if idle and tiny["requests_total"] == 3:
                break
            assert time.monotonic() < deadline, (
                f"still decoding: {stats['running']} running, {tiny['requests_total']} seen"
            )
            time.sleep(0.2)
        r = httpx.post(url, json={**body, "stream": False, "max_tokens": 8}, timeout=60)
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 8
    assert "Traceback" not in split.log()
