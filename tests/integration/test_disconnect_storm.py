"""Disconnect storms: 1,000 streamed requests at concurrency 32, 30% of clients leaving at a
random point, three storms against one real server process. No slot may leak, memory
must settle after the first storm, and every request after a storm is served."""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
from pathlib import Path

import httpx
import pytest

from tests.integration.test_crash_kills import _server

# OMLX_STORM_REQUESTS shortens the storms for a look at a slower model.
NUM_REQUESTS = int(os.environ.get("OMLX_STORM_REQUESTS", "1000"))
CONCURRENCY = 32
LEAVE_SHARE = 0.3
# Read at import: the autouse fixture clears OMLX_* variables before each test.
STORM_MODEL = os.environ.get("OMLX_STORM_MODEL", "")
STORM_HOT_BUDGET = os.environ.get("OMLX_STORM_HOT_BUDGET", str(16 * 1024))


def _rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


async def _one(client: httpx.AsyncClient, i: int, rng: random.Random) -> str:
    words = " ".join(rng.choice(["red", "green", "blue", "cat", "dog", "sun"]) for _ in range(40))
    body = {"model": "tiny", "stream": True, "max_tokens": 24, "temperature": 0.7, "seed": i,
            "messages": [{"role": "user", "content": f"{i}: {words}"}]}  # fmt: skip
    leave_after = rng.randrange(0, 12) if rng.random() < LEAVE_SHARE else None
    async with client.stream("POST", "/v1/chat/completions", json=body) as r:
        if r.status_code != 200:
            return f"status {r.status_code}"
        seen = 0
        async for line in r.aiter_lines():
            if leave_after is not None and seen >= leave_after:
                return "left"  # closing the stream here drops the connection mid-answer
            if line.startswith("data: "):
                seen += 1
                if line == "data: [DONE]":
                    return "done"
    return "truncated"


async def _storm(base: str, seed: int) -> dict[str, int]:
    rng = random.Random(seed)
    gate = asyncio.Semaphore(CONCURRENCY)
    limits = httpx.Limits(max_connections=CONCURRENCY, max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=base, timeout=300, limits=limits) as client:

        async def run(i: int) -> str:
            async with gate:
                return await _one(client, i, rng)

        outcomes = await asyncio.gather(
            *(run(seed * NUM_REQUESTS + i) for i in range(NUM_REQUESTS))
        )
    return {k: outcomes.count(k) for k in set(outcomes)}


def _settled_stats(base: str) -> dict:
    deadline = time.monotonic() + 60
    while True:
        stats = httpx.get(f"{base}/api/stats").json()
        if (stats["running"] == 0 and stats["queued"] == 0) or time.monotonic() > deadline:
            return stats
        time.sleep(0.2)


@pytest.mark.soak
@pytest.mark.timeout(3000)
def test_three_disconnect_storms(
    tiny_llama_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The tiny llama keeps three storms within minutes on 2 cores; OMLX_STORM_MODEL names
    # another folder (the default model) and OMLX_STORM_HOT_BUDGET the RAM tier's bytes.
    model = Path(STORM_MODEL) if STORM_MODEL else tiny_llama_dir
    monkeypatch.setenv("OMLX_TEST_HOT_BUDGET", STORM_HOT_BUDGET)
    figures: list[dict] = []
    with _server(model, tmp_path / "cold") as (base, proc):
        httpx.post(f"{base}/v1/chat/completions", timeout=60, json={
            "model": "tiny", "max_tokens": 4,
            "messages": [{"role": "user", "content": "warm up"}]})  # fmt: skip
        for storm in range(3):
            t0, rss_before = time.monotonic(), _rss_bytes(proc.pid)
            outcomes = asyncio.run(_storm(base, storm))
            stats = _settled_stats(base)
            after = httpx.post(f"{base}/v1/chat/completions", timeout=60, json={
                "model": "tiny", "max_tokens": 4,
                "messages": [{"role": "user", "content": "still there?"}]})  # fmt: skip
            figures.append({
                "storm": storm + 1, "outcomes": outcomes, "seconds": round(time.monotonic() - t0),
                "slots_leaked": stats["running"] + stats["queued"],
                "rss_before_mb": round(rss_before / 2**20),
                "rss_after_mb": round(_rss_bytes(proc.pid) / 2**20),
                "client_disconnects": stats["http"]["client_disconnects_total"],
                "server_errors": stats["http"]["server_errors_total"],
                "served_after": after.status_code,
                # where the memory is: KV blocks kept in RAM, MLX's arrays and its cache
                "hot_tier_mb": round(stats["cache"]["hot"]["bytes"] / 2**20, 1),
                "mlx_active_mb": round(stats["memory"]["mlx_active_bytes"] / 2**20),
                "mlx_cache_mb": round(stats["memory"]["mlx_cache_bytes"] / 2**20),
            })  # fmt: skip
            print("storm:", json.dumps(figures[-1]), flush=True)
    for f in figures:
        assert f["slots_leaked"] == 0 and f["served_after"] == 200 and f["server_errors"] == 0
        assert f["outcomes"].get("done", 0) + f["outcomes"].get("left", 0) == NUM_REQUESTS
    first = figures[0]["rss_after_mb"]
    assert all(f["rss_after_mb"] <= first * 1.10 for f in figures[1:]), figures
