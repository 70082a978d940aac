"""The OpenAI API against the real engine (tiny llama; SmolLM2 when imported) on 127.0.0.1."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from omlx.pool.pool import LocalModelPool
from omlx.server.app import create_app
from omlx.settings import EngineSettings, ServerSettings, Settings
from tests.fixtures.live_server import LiveServer, running_server
from tests.fixtures.tiny_tokenizer import EOS_TOKEN, tokenizer_vocab

pytestmark = pytest.mark.timeout(180)


def _serve(model_dir: Path, name: str = "tiny", **engine: object):
    settings = Settings(
        engine=EngineSettings(**engine),  # type: ignore[arg-type]
        server=ServerSettings(keepalive_interval_s=0.05),
    )
    pool = LocalModelPool(settings, models={name: model_dir})
    return running_server(create_app(pool, settings, close_pool_on_shutdown=True), settings)


@pytest.fixture(scope="module")
def live(tiny_llama_dir: Path) -> Iterator[LiveServer]:
    with _serve(tiny_llama_dir, prefill_step_tokens=16) as server:
        yield server


@pytest.fixture
def client(live: LiveServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=live.openai_base_url, api_key="x", max_retries=0, timeout=60)


def _chat(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


GREEDY = {"model": "tiny", "messages": _chat("Tell me a story"), "max_tokens": 24, "temperature": 0}


def test_chat_and_completion_streamed_and_not(client: openai.OpenAI) -> None:
    r = client.chat.completions.create(**GREEDY)
    assert r.usage.completion_tokens >= 1 and r.usage.prompt_tokens > 3
    streamed = list(
        client.chat.completions.create(
            **GREEDY, stream=True, stream_options={"include_usage": True}
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in streamed if c.choices)
    assert text == r.choices[0].message.content
    assert streamed[-1].usage.completion_tokens == r.usage.completion_tokens
    c = client.completions.create(model="tiny", prompt="Once upon", max_tokens=5, temperature=0)
    assert c.choices[0].text and c.usage.prompt_tokens >= 1


def test_greedy_request_in_a_mixed_batch_matches_alone(live: LiveServer) -> None:
    async def main() -> tuple[str, list[str]]:
        aclient = openai.AsyncOpenAI(base_url=live.openai_base_url, api_key="x", max_retries=0)
        alone = (await aclient.chat.completions.create(**GREEDY)).choices[0].message.content
        mixed = [
            {"temperature": 0.8, "seed": 1},
            {"temperature": 1.0, "top_p": 0.9, "seed": 2},
            {"temperature": 0.7, "extra_body": {"top_k": 20, "min_p": 0.05}},
            {"temperature": 0.9, "presence_penalty": 0.5, "frequency_penalty": 0.5},
            {"temperature": 0, "extra_body": {"repetition_penalty": 1.3}},
            {"temperature": 0.5, "logit_bias": {"100": 5}},
            {"temperature": 1.2, "seed": 3, "logprobs": True, "top_logprobs": 2},
        ]
        others = [
            aclient.chat.completions.create(
                model="tiny", messages=_chat(f"Prompt number {i} " * (i + 1)), max_tokens=30, **kw
            )
            for i, kw in enumerate(mixed)
        ]
        results = await asyncio.gather(aclient.chat.completions.create(**GREEDY), *others)
        await aclient.close()
        return alone, [r.choices[0].message.content for r in results]

    alone, batch = asyncio.run(main())
    assert alone
    assert batch[0] == alone
    assert len(batch) == 8


def test_stop_strings_end_the_text_and_are_not_emitted(client: openai.OpenAI) -> None:
    full = client.chat.completions.create(**GREEDY).choices[0].message.content
    assert len(full) > 20
    stop = full[12:16]
    expected = full[: full.find(stop)]
    r = client.chat.completions.create(**GREEDY, stop=[stop])
    assert r.choices[0].message.content == expected
    assert r.choices[0].finish_reason == "stop"
    chunks = client.chat.completions.create(**GREEDY, stop=stop, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == expected


def test_keepalive_frames_during_a_long_prefill(live: LiveServer) -> None:
    body = {"model": "tiny", "messages": _chat("word " * 2500), "max_tokens": 2, "stream": True}
    pings, content_seen = 0, False
    with httpx.stream("POST", f"{live.base_url}/v1/chat/completions", json=body, timeout=60) as r:
        for line in r.iter_lines():
            if line == ": keep-alive" and not content_seen:
                pings += 1
            elif (
                line.startswith("data: {") and '"content":"' in line and '"content":""' not in line
            ):
                content_seen = True
    assert content_seen
    assert pings >= 3  # one at once, then every 0.05 s of a prefill in 16-token chunks


def _has_content(line: str) -> bool:
    return line.startswith("data: {") and '"content":"' in line and '"content":""' not in line


def _running(base_url: str) -> int:
    return httpx.get(f"{base_url}/api/stats").json()["running"]


def test_disconnected_client_frees_its_slot(tiny_llama_dir: Path) -> None:
    eos = tokenizer_vocab()[EOS_TOKEN]
    endless = {
        "model": "tiny",
        "messages": _chat("go on"),
        "max_tokens": 4000,
        "logit_bias": {str(eos): -100},
        "stream": True,
    }
    with _serve(tiny_llama_dir, max_running=1, max_queued=0) as server:
        url = f"{server.base_url}/v1/chat/completions"
        with httpx.stream("POST", url, json=endless, timeout=30) as r:
            # next() rather than `for ... break`: leaving the generator would close the socket.
            lines = r.iter_lines()
            while not _has_content(next(lines)):
                pass
            # The only slot is taken: another request is refused, not queued forever.
            busy = httpx.post(url, json={**endless, "stream": False, "max_tokens": 2})
            assert busy.status_code == 503 and "retry-after" in busy.headers
            assert _running(server.base_url) == 1
        # Leaving the block closes the connection mid-stream.
        deadline = time.monotonic() + 10
        while _running(server.base_url) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _running(server.base_url) == 0
        ok = httpx.post(url, json={**endless, "stream": False, "max_tokens": 3}, timeout=30)
        assert ok.status_code == 200, ok.text
        assert ok.json()["usage"]["completion_tokens"] == 3


@pytest.mark.realmodel
def test_smollm2_knows_the_capital_of_france(request: pytest.FixtureRequest) -> None:
    try:
        smollm2_dir = request.getfixturevalue("smollm2_dir")
    except pytest.FixtureLookupError:
        pytest.skip("smollm2_dir fixture (tests/fixtures/real_models.py) not available")
    with _serve(smollm2_dir, name="smollm2") as server:
        client = openai.OpenAI(base_url=server.openai_base_url, api_key="x", max_retries=0)
        r = client.chat.completions.create(
            model="smollm2",
            messages=_chat("What is the capital of France? Answer in one word."),
            max_tokens=16,
            temperature=0,
        )
    assert "paris" in r.choices[0].message.content.lower()


def test_a_long_prompt_without_max_tokens_gets_the_room_left(
    client: openai.OpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    """3,000 of 4,096 tokens: no fixed default of 2048 is filled in over HTTP, and an
    agent's max_tokens past the context is clamped to the room left (and logged)."""
    prompt = [100] * 3000
    unset = client.completions.create(model="tiny", prompt=prompt, temperature=0)
    assert unset.usage.prompt_tokens == 3000 and unset.usage.completion_tokens >= 1
    caplog.set_level("INFO", logger="omlx.server.access")
    big = client.completions.create(
        model="tiny", prompt=[100] * 4090, max_tokens=64000, temperature=0
    )
    assert 1 <= big.usage.completion_tokens <= 6
    # The access line is written once the response is sent: the client may read first.
    deadline = time.monotonic() + 30
    while "max_tokens=64000->6" not in caplog.text and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "max_tokens=64000->6" in caplog.text
