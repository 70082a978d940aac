"""Completions with echo and logprobs return the prompt's own log-probabilities, and they
agree with what the engine reported while it generated the same tokens."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

import httpx
import pytest

from omlx.pool.pool import LocalModelPool
from omlx.settings import Settings
from tests.fixtures.live_server import running_server

PROMPT = "The quick brown fox jumps over the lazy dog and the"


def _complete(base: str, prompt: str, **extra) -> dict:
    body = {"model": "tiny", "prompt": prompt, "temperature": 0, "logprobs": 2, **extra}
    r = httpx.post(f"{base}/v1/completions", json=body, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]


def test_echo_with_logprobs_scores_the_prompt(tiny_llama_dir: Path) -> None:
    pool = LocalModelPool(Settings(), models={"tiny": tiny_llama_dir})
    with running_server(pool, Settings()) as live:
        generated = _complete(live.base_url, PROMPT, max_tokens=4)
        # The token strings, not the text: the detokenizer trims the answer's first space.
        text = PROMPT + "".join(generated["logprobs"]["tokens"])
        echoed = _complete(live.base_url, text, max_tokens=1, echo=True)
    asyncio.run(pool.close(grace_s=0))
    lp = echoed["logprobs"]
    assert echoed["text"].startswith(text)
    assert "".join(lp["tokens"]).startswith(text)
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
    num_prompt = len(lp["tokens"]) - 1  # one generated token follows the echo
    assert all(v <= 0 and math.isfinite(v) for v in lp["token_logprobs"][1:num_prompt])
    assert all(len(top) == 2 for top in lp["top_logprobs"][1:num_prompt])
    assert lp["text_offset"][:3] == [0, len(lp["tokens"][0]), len("".join(lp["tokens"][:2]))]
    # The last prompt tokens are the ones generated before: same tokens, same logprobs.
    gen = generated["logprobs"]
    assert lp["tokens"][num_prompt - 4 : num_prompt] == gen["tokens"]
    got = lp["token_logprobs"][num_prompt - 4 : num_prompt]
    assert got == pytest.approx(gen["token_logprobs"], abs=2e-3)
