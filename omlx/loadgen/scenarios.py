"""Load scenarios: a concurrency sweep, and decode streams disturbed by a long prefill."""

from __future__ import annotations

import asyncio
import itertools
import time
from dataclasses import asdict, dataclass

import httpx

from omlx.loadgen.client import RequestTiming, filler_prompt, stream_chat
from omlx.loadgen.percentiles import percentile


@dataclass(slots=True)
class LevelResult:
    concurrency: int
    prompt_words: int
    num_requests: int
    num_failed: int
    wall_s: float
    aggregate_tps: float
    ttft_p50_s: float | None
    ttft_p95_s: float | None
    itl_p50_ms: float | None
    itl_p95_ms: float | None
    per_request_tps: float
    prompt_tokens: int
    errors: list[str]

    def to_dict(self) -> dict:
        return asdict(self)


def summarise(
    timings: list[RequestTiming], concurrency: int, prompt_words: int, wall_s: float
) -> LevelResult:
    ok = [t for t in timings if t.ok and t.first_token_s is not None]
    gaps_ms = [g * 1000 for t in ok for g in t.gaps_s]
    ttfts = [t.ttft_s for t in ok if t.ttft_s is not None]
    tokens = sum(t.completion_tokens for t in ok)
    rates = [t.decode_tps for t in ok if t.decode_tps > 0]
    return LevelResult(
        concurrency=concurrency,
        prompt_words=prompt_words,
        num_requests=len(timings),
        num_failed=len(timings) - len(ok),
        wall_s=wall_s,
        aggregate_tps=tokens / wall_s if wall_s > 0 else 0.0,
        ttft_p50_s=percentile(ttfts, 50),
        ttft_p95_s=percentile(ttfts, 95),
        itl_p50_ms=percentile(gaps_ms, 50),
        itl_p95_ms=percentile(gaps_ms, 95),
        per_request_tps=sum(rates) / len(rates) if rates else 0.0,
        prompt_tokens=max((t.prompt_tokens for t in ok), default=0),
        errors=sorted({t.error for t in timings if t.error})[:5],
    )


def _client(concurrency: int, timeout_s: float) -> httpx.AsyncClient:
    limits = httpx.Limits(max_connections=concurrency + 4, max_keepalive_connections=concurrency)
    return httpx.AsyncClient(timeout=httpx.Timeout(timeout_s), limits=limits)


async def run_level(
    base_url: str,
    model: str,
    *,
    concurrency: int,
    num_requests: int,
    prompt_words: int,
    max_tokens: int,
    api_key: str = "",
    timeout_s: float = 600.0,
    salt: int = 0,
    on_done=None,
) -> LevelResult:
    """num_requests requests, at most `concurrency` in flight; each prompt distinct."""
    sem = asyncio.Semaphore(concurrency)
    async with _client(concurrency, timeout_s) as client:

        async def one(i: int) -> RequestTiming:
            async with sem:
                prompt = filler_prompt(prompt_words, salt=salt * 100_000 + i)
                t = await stream_chat(client, base_url, model, prompt, max_tokens, api_key)
            if on_done:
                on_done()
            return t

        start = time.perf_counter()
        timings = await asyncio.gather(*(one(i) for i in range(num_requests)))
        wall = time.perf_counter() - start
    return summarise(list(timings), concurrency, prompt_words, wall)


@dataclass(slots=True)
class InterferenceResult:
    """How running streams fare while another request prefills a long prompt."""

    num_streams: int
    long_prompt_tokens: int
    long_ttft_s: float | None
    gap_before_ms: float | None  # median inter-token gap of the streams before the long prompt
    gap_during_ms: float | None  # median gap while the long prompt was prefilling
    max_gap_during_ms: float | None
    speed_kept: float | None  # gap_before / gap_during: 1.0 = undisturbed

    def to_dict(self) -> dict:
        return asdict(self)


async def run_interference(
    base_url: str,
    model: str,
    *,
    num_streams: int = 4,
    long_prompt_words: int = 1000,
    max_tokens: int = 200,
    warmup_s: float = 3.0,
    api_key: str = "",
    timeout_s: float = 900.0,
) -> InterferenceResult:
    """Start decode streams, then a long prompt; compare the streams' gaps before/during."""
    async with _client(num_streams + 2, timeout_s) as client:
        streams = [
            asyncio.create_task(
                stream_chat(
                    client, base_url, model, filler_prompt(20, 9000 + i), max_tokens, api_key
                )
            )
            for i in range(num_streams)
        ]
        await asyncio.sleep(warmup_s)
        long_start = time.perf_counter()
        long = await stream_chat(
            client, base_url, model, filler_prompt(long_prompt_words, 7777), 1, api_key
        )
        long_first = long.first_token_s or time.perf_counter()
        timings = await asyncio.gather(*streams)

    def gaps_in(lo: float, hi: float) -> list[float]:
        out = []
        for t in timings:
            ts = t.chunk_times_s
            out += [(b - a) * 1000 for a, b in itertools.pairwise(ts) if lo <= b <= hi]
        return out

    before = gaps_in(0.0, long_start)
    during = gaps_in(long_start, long_first)
    # A gap that spans the whole prefill ends just after it: count it as "during".
    during += [
        (b - a) * 1000
        for t in timings
        for a, b in zip(t.chunk_times_s, t.chunk_times_s[1:], strict=False)
        if a < long_first < b
    ]
    g_before, g_during = percentile(before, 50), percentile(during, 50)
    return InterferenceResult(
        num_streams=num_streams,
        long_prompt_tokens=long.prompt_tokens,
        long_ttft_s=long.ttft_s,
        gap_before_ms=g_before,
        gap_during_ms=g_during,
        max_gap_during_ms=max(during) if during else None,
        speed_kept=(g_before / g_during) if g_before and g_during else None,
    )
