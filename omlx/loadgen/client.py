"""One streamed chat request, timed token by token from the client's side."""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from dataclasses import dataclass, field

import httpx


@dataclass(slots=True)
class RequestTiming:
    ok: bool
    start_s: float
    end_s: float = 0.0
    first_token_s: float | None = None
    chunk_times_s: list[float] = field(default_factory=list)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    error: str = ""

    @property
    def ttft_s(self) -> float | None:
        return None if self.first_token_s is None else self.first_token_s - self.start_s

    @property
    def gaps_s(self) -> list[float]:
        t = self.chunk_times_s
        return [b - a for a, b in itertools.pairwise(t)]

    @property
    def decode_tps(self) -> float:
        if self.first_token_s is None or self.completion_tokens < 2:
            return 0.0
        span = self.end_s - self.first_token_s
        return (self.completion_tokens - 1) / span if span > 0 else 0.0


def filler_prompt(num_words: int, salt: int = 0) -> str:
    """A prompt of roughly num_words tokens; salt keeps prompts distinct (no cache hits)."""
    words = ("river", "stone", "light", "garden", "north", "paper", "silver", "cloud")
    body = " ".join(words[(i * 7 + salt) % len(words)] for i in range(num_words))
    return f"[{salt}] Summarise this text in one sentence: {body}"


async def stream_chat(
    client: httpx.AsyncClient,
    base_url: str,
    model: str,
    prompt: str,
    max_tokens: int,
    api_key: str = "",
    temperature: float = 0.0,
    stop: asyncio.Event | None = None,
    extra: dict | None = None,
    timing: RequestTiming | None = None,
) -> RequestTiming:
    """POST a streamed chat completion and record when each content chunk arrives.

    When `stop` is set the stream is closed at its next line (the server sees a
    disconnect); what arrived until then counts as a complete timing. `extra`: more body
    fields (e.g. logit_bias). `timing`, when given, is filled in as chunks arrive (and
    returned), so a caller can watch a stream's progress.
    """
    body = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": temperature,
        "stream": True,
        "stream_options": {"include_usage": True},
        **(extra or {}),
    }
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    if timing is None:
        timing = RequestTiming(ok=False, start_s=time.perf_counter())
    num_chunks = 0
    try:
        async with client.stream(
            "POST", f"{base_url}/v1/chat/completions", json=body, headers=headers
        ) as resp:
            if resp.status_code != 200:
                timing.error = f"HTTP {resp.status_code}: {(await resp.aread())[:200]!r}"
                return timing
            async for line in resp.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                num_chunks += _absorb_chunk(timing, json.loads(data))
                if stop is not None and stop.is_set():
                    break
        timing.ok = True
    except (httpx.HTTPError, json.JSONDecodeError) as e:
        timing.error = f"{type(e).__name__}: {e}"
    finally:
        timing.end_s = time.perf_counter()
    if not timing.completion_tokens:
        timing.completion_tokens = num_chunks
    return timing


def _absorb_chunk(timing: RequestTiming, chunk: dict) -> int:
    """Record a chunk's arrival if it carries generated text; returns 1 if it did."""
    usage = chunk.get("usage")
    if usage:
        timing.prompt_tokens = usage.get("prompt_tokens", 0)
        timing.completion_tokens = usage.get("completion_tokens", 0)
        details = usage.get("prompt_tokens_details") or {}
        timing.cached_tokens = details.get("cached_tokens", 0) or 0
    for choice in chunk.get("choices") or []:
        delta = choice.get("delta") or {}
        if delta.get("content") or delta.get("reasoning_content") or delta.get("tool_calls"):
            now = time.perf_counter()
            if timing.first_token_s is None:
                timing.first_token_s = now
            timing.chunk_times_s.append(now)
            return 1
    return 0
