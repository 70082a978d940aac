"""The README's quick start, as a new user runs it: `omlx serve` with the default model,
then the README's own curl example."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import httpx
import pytest

from omlx.loadgen.server_process import free_port, server_process

pytestmark = [pytest.mark.timeout(300), pytest.mark.realmodel]

README = Path(__file__).resolve().parents[2] / "README.md"


def _first_curl_body() -> dict:
    """The JSON body of the README's first `curl ... -d '{...}'` example."""
    match = re.search(r"curl [^`]*?-d '(\{.*?\})'", README.read_text(), re.S)
    assert match, "no curl example with a JSON body in README.md"
    return json.loads(match.group(1))


def test_the_first_readme_example_answers_sensibly(tmp_path: Path, smollm2_dir: Path) -> None:
    body = _first_curl_body()
    assert "temperature" not in body  # the point: the model's own defaults apply
    home = tmp_path / "omlx-home"
    (home / "models").mkdir(parents=True)
    # The default model as the first `omlx serve` imports it (the fixture runs that import).
    (home / "models" / smollm2_dir.name).symlink_to(smollm2_dir, target_is_directory=True)
    port = free_port()
    env = {**os.environ, "OMLX_HOME": str(home)}
    cmd = [sys.executable, "-m", "omlx.cli.main", "serve", "--port", str(port)]
    with server_process(cmd, port, env=env, log_path=tmp_path / "serve.log") as base:
        r = httpx.post(f"{base}/v1/chat/completions", json=body, timeout=240)
    assert r.status_code == 200, r.text
    answer = r.json()["choices"][0]["message"]["content"]
    assert "Paris" in answer, answer
    assert r.json()["choices"][0]["finish_reason"] == "stop"  # not rambling to the limit
