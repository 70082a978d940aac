"""`omlx bench` against a live server, and with a server of its own (--dflash)."""

from __future__ import annotations

import json
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
