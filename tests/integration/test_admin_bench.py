"""The admin's benchmark through its API: `omlx bench`'s load generator against this
server, and against a DFlash server it starts, with the run kept under OMLX_HOME."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from omlx.pool.pool import LocalModelPool
from omlx.server.admin import AdminOptions
from omlx.server.app import create_app
from omlx.settings import EngineSettings, ServerSettings, Settings
from tests.fixtures.live_server import running_server

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]
KEY = "bench-key"


def _finish(client: httpx.Client, job: dict) -> dict:
    deadline = time.monotonic() + 300
    while job["state"] == "running" and time.monotonic() < deadline:
        time.sleep(0.5)
        job = client.get(f"/admin/api/jobs/{job['id']}").json()
    return job


def test_bench_runs_here_and_on_a_dflash_server(tiny_qwen3_dir: Path, _isolated_omlx_home) -> None:
    models = _isolated_omlx_home / "models"
    models.mkdir()
    (models / "tiny-qwen3").symlink_to(tiny_qwen3_dir, target_is_directory=True)
    settings = Settings(
        engine=EngineSettings(default_model="tiny-qwen3"), server=ServerSettings(api_key=KEY)
    )
    pool = LocalModelPool(settings, models={"tiny-qwen3": tiny_qwen3_dir})
    options = AdminOptions(config_file=_isolated_omlx_home / "c.toml")
    app = create_app(pool, settings, close_pool_on_shutdown=True, admin_options=options)
    with running_server(app, settings) as live:
        client = httpx.Client(base_url=live.base_url, headers={"x-api-key": KEY}, timeout=60)
        body = {"model": "tiny-qwen3", "concurrency": [1, 2], "prompt_words": [16],
                "max_tokens": 8}  # fmt: skip
        busy = client.post("/admin/api/bench", json={**body, "concurrency": [0]})
        assert busy.status_code == 400 and busy.json()["error"]["param"] == "concurrency"
        job = _finish(client, client.post("/admin/api/bench", json=body).json())
        assert job["state"] == "done", job
        run = job["result"]
        assert run["target"] == "this server" and run["finished"]
        assert [lv["concurrency"] for lv in run["levels"]] == [1, 2]
        assert all(lv["num_failed"] == 0 and lv["aggregate_tps"] > 0 for lv in run["levels"])
        dflash = {**body, "concurrency": [1], "requests": 2, "dflash": True}
        job = _finish(client, client.post("/admin/api/bench", json=dflash).json())
        assert job["state"] == "done", job
        assert job["result"]["target"].startswith("omlx serve --dflash")
        assert job["result"]["levels"][0]["num_failed"] == 0
        runs = client.get("/admin/api/bench/runs").json()
        assert [r["dflash"] for r in runs] == [True, False]
    assert len(list((_isolated_omlx_home / "bench").glob("*.json"))) == 2
