"""`omlx bench` against a live server, and with a server of its own (--dflash)."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from omlx.cli.main import app as cli_app
from omlx.pool.pool import LocalModelPool
from omlx.server.app import create_app
from omlx.settings import EngineSettings, Settings
from tests.fixtures.live_server import running_server

pytestmark = pytest.mark.timeout(300)


def _levels(output: str) -> list[dict]:
    return json.loads(output.strip().splitlines()[-1])["levels"]


def test_bench_against_a_running_server(tiny_llama_dir: Path) -> None:
    settings = Settings(engine=EngineSettings(default_model="tiny"))
    pool = LocalModelPool(settings, models={"tiny": tiny_llama_dir})
    app = create_app(pool, settings, close_pool_on_shutdown=True)
    with running_server(app, settings) as live:
        result = CliRunner().invoke(cli_app, [
            "bench", "--url", live.base_url, "--concurrency", "1,3", "--prompt-words", "16",
            "--max-tokens", "8", "--json",
        ])  # fmt: skip
    assert result.exit_code == 0, result.output
    levels = _levels(result.output)
    assert [lv["concurrency"] for lv in levels] == [1, 3]
    for lv in levels:
        assert lv["num_failed"] == 0 and lv["num_requests"] == 2 * lv["concurrency"]
        assert lv["aggregate_tps"] > 0 and lv["ttft_p50_s"] > 0 and lv["prompt_tokens"] > 16


@pytest.fixture(scope="module")
def live_tiny(tiny_llama_dir: Path):
    settings = Settings(engine=EngineSettings(default_model="tiny"))
    pool = LocalModelPool(settings, models={"tiny": tiny_llama_dir})
    app = create_app(pool, settings, close_pool_on_shutdown=True)
    with running_server(app, settings) as live:
        yield live


SMALL = ["--concurrency", "1,2", "--prompt-words", "16", "--max-tokens", "4"]


def test_bench_shows_progress_on_stderr_and_the_table_on_stdout(live_tiny) -> None:
    """Not a terminal (a log, CI): one line per step on stderr; stdout keeps the result."""
    result = CliRunner().invoke(cli_app, ["bench", "--url", live_tiny.base_url, *SMALL])
    assert result.exit_code == 0, result.output
    steps = [line.split("] ", 1)[1] for line in result.stderr.splitlines()]
    assert steps == [
        "warming up tiny (loads it if the server has not)",
        "level 1/2: 2 requests, 1 at a time, prompts of ~16 tokens",
        steps[2],
        "level 2/2: 4 requests, 2 at a time, prompts of ~16 tokens",
        steps[4],
    ]
    assert all(s.startswith(f"level {i}/2 done in ") for i, s in ((1, steps[2]), (2, steps[4])))
    assert "omlx bench: tiny" in result.stdout and "level" not in result.stdout
    quiet = CliRunner().invoke(cli_app, ["bench", "--url", live_tiny.base_url, *SMALL, "--json"])
    assert quiet.exit_code == 0 and quiet.stderr == ""
    assert [lv["concurrency"] for lv in json.loads(quiet.stdout)["levels"]] == [1, 2]


def test_bench_sends_prompts_from_a_file_or_the_held_out_set(live_tiny, tmp_path) -> None:
    long = " ".join(f"word{i}" for i in range(60))
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"prompt": "hi"}) + "\n" + json.dumps({"prompt": long}) + "\n")
    base = ["bench", "--url", live_tiny.base_url, "--concurrency", "2", "--max-tokens", "4"]
    result = CliRunner().invoke(cli_app, [*base, "--prompts", str(prompts), "--json"])
    assert result.exit_code == 0, result.output
    (level,) = _levels(result.output)
    # Both prompts went out: the longer one's ~60 words (filler text is not used).
    assert level["num_failed"] == 0 and level["prompt_tokens"] > 60
    assert level["prompt_words"] == 0
    held = CliRunner().invoke(cli_app, [*base, "--prompts", "heldout", "--json"])
    assert held.exit_code == 0, held.output
    assert _levels(held.output)[0]["num_failed"] == 0
    missing = CliRunner().invoke(cli_app, [*base, "--prompts", str(tmp_path / "none.jsonl")])
    assert missing.exit_code != 0 and "none.jsonl" in missing.output


def test_bench_draws_a_live_bar_on_a_terminal(live_tiny) -> None:
    """stderr on a terminal (a pty here): the bar counts requests, stdout stays clean."""
    main_fd, term_fd = pty.openpty()
    cmd = [sys.executable, "-m", "omlx.cli.main", "bench", "--url", live_tiny.base_url, *SMALL]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=term_fd, text=True,
                            env={**os.environ, "COLUMNS": "120", "TERM": "xterm"})  # fmt: skip
    os.close(term_fd)
    shown = b""
    while True:
        try:
            chunk = os.read(main_fd, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        shown += chunk
    os.close(main_fd)
    out = proc.stdout.read() if proc.stdout else ""
    assert proc.wait(60) == 0
    text = shown.decode(errors="replace")
    assert "requests" in text and "/6" in text  # the bar: done of 6 requests
    assert "level 2/2 done in" in text
    assert "omlx bench: tiny" in out and "requests" not in out


def test_bench_dflash_starts_its_own_server(tiny_qwen3_dir: Path) -> None:
    result = CliRunner().invoke(cli_app, [
        "bench", "--dflash", "--model", str(tiny_qwen3_dir), "--concurrency", "1",
        "--prompt-words", "16", "--max-tokens", "8", "--requests", "2", "--json",
    ])  # fmt: skip
    assert result.exit_code == 0, result.output
    [level] = _levels(result.output)
    assert level["num_failed"] == 0 and level["aggregate_tps"] > 0


def test_bench_rejects_bad_levels() -> None:
    result = CliRunner().invoke(cli_app, ["bench", "--url", "http://x", "--concurrency", "0"])
    assert result.exit_code == 1 and "positive integers" in result.output
