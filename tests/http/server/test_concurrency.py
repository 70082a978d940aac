"""A burst of 256 concurrent streaming requests: every connection is accepted and completes."""

from __future__ import annotations

import asyncio

import httpx

from tests.fixtures.fake_pool import FakeModelPool, text_script
from tests.fixtures.live_server import LiveServer

NUM_STREAMS = 256


async def _one(client: httpx.AsyncClient, url: str, i: int) -> str:
    body = {"model": "fake-model", "prompt": f"p{i}", "stream": True}
    text = []
    async with client.stream("POST", url, json=body) as r:
        assert r.status_code == 200
        async for line in r.aiter_lines():
            if line.startswith("data: {"):
                text.append(line)
            elif line == "data: [DONE]":
                return "done"
    return "cut"


def test_256_concurrent_streams_none_dropped(pool: FakeModelPool, server: LiveServer) -> None:
    script = text_script(["a"] * 5, first_token_delay_s=0.5, token_delay_s=0.05)
    pool.script_for = lambda req: script

    async def main() -> list[str | BaseException]:
        limits = httpx.Limits(max_connections=NUM_STREAMS, max_keepalive_connections=0)
        async with httpx.AsyncClient(limits=limits, timeout=60) as client:
            url = f"{server.base_url}/v1/completions"
            return await asyncio.gather(
                *(_one(client, url, i) for i in range(NUM_STREAMS)), return_exceptions=True
            )

    results = asyncio.run(main())
    errors = [r for r in results if r != "done"]
    assert not errors, f"{len(errors)} of {NUM_STREAMS} failed, e.g. {errors[:3]}"
    assert len(pool.requests) == NUM_STREAMS
