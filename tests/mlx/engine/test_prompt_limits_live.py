"""A huge prompt is refused at once (bytes against the window), without templating or
tokenizing it, while a small request beside it is served."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx

from omlx.pool.pool import LocalModelPool
from omlx.settings import Settings
from tests.fixtures.live_server import running_server


def test_huge_prompt_is_refused_before_tokenizing(tiny_llama_dir: Path) -> None:
    pool = LocalModelPool(Settings(), models={"tiny": tiny_llama_dir})
    huge = {"model": "tiny", "messages": [{"role": "user", "content": "word " * 1_000_000}]}
    small = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}

    async def both(base_url: str) -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=base_url, timeout=120) as client:
            url = "/v1/chat/completions"
            return await asyncio.gather(client.post(url, json=huge), client.post(url, json=small))

    with running_server(pool, Settings()) as live:
        refused, served = asyncio.run(both(live.base_url))
    assert served.status_code == 200, served.text
    assert refused.status_code == 400
    error = refused.json()["error"]
    assert error["code"] == "context_length_exceeded"
    # The early check's wording: judged in bytes, so the tokenizer never ran.
    assert "5000000 bytes" in error["message"] and "4096-token" in error["message"]
    asyncio.run(pool.close(grace_s=0))
