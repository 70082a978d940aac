"""Load scenarios: a concurrency sweep, and decode streams disturbed by a long prefill."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Sequence
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
    prompts: Sequence[str] = (),
) -> LevelResult:
    """num_requests requests, at most `concurrency` in flight; each prompt distinct (filler
    text of `prompt_words`), or the given `prompts` in turn (the same ones every level)."""
    sem = asyncio.Semaphore(concurrency)
    async with _client(concurrency, timeout_s) as client:

        async def one(i: int) -> RequestTiming:
            async with sem:
                if prompts:
                    prompt = prompts[i % len(prompts)]
                else:
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
    """How running streams fare while another request prefills a long prompt.

    A stream's decode step slows as its context grows, so the gaps during the prefill are
    read against a control run of the same streams alone (greedy, same prompts: the same
    tokens) at the same chunk indices; the gaps from before the long prompt, at shorter
    contexts, are kept as a second, naive reading.
    """

    num_streams: int
    long_prompt_tokens: int
    long_ttft_s: float | None
    gap_before_ms: float | None  # median inter-token gap of the streams before the long prompt
    gap_during_ms: float | None  # median gap while the long prompt was prefilling
    max_gap_during_ms: float | None
    control_gap_ms: float | None  # mean gap of the control run at the same chunk indices
    speed_kept: float | None  # control / during, summed over those indices: 1.0 = undisturbed
    speed_kept_vs_before: float | None  # mean gap before / mean gap during
    gaps_during: int = 0

    def to_dict(self) -> dict:
        return asdict(self)


async def run_interference(
    base_url: str,
    model: str,
    *,
    num_streams: int = 4,
    long_prompt_words: int = 1000,
    max_tokens: int = 4000,
    warmup_s: float = 3.0,
    api_key: str = "",
    timeout_s: float = 900.0,
    eos_token_ids: Sequence[int] = (),
) -> InterferenceResult:
    """Decode streams, then a long prompt; then the same streams alone (the control).

    The streams run until the long prompt's first token arrives (at most max_tokens);
    eos_token_ids are banned through logit_bias, so that none ends before the prefill does
    (a short answer would leave only the pacer's first steps measured).
    """
    extra = {"logit_bias": {str(t): -100 for t in eos_token_ids}} if eos_token_ids else None
    prompts = [filler_prompt(20, 9000 + i) for i in range(num_streams)]
    async with _client(num_streams + 2, timeout_s) as client:
        stop = asyncio.Event()
        live = [RequestTiming(ok=False, start_s=time.perf_counter()) for _ in prompts]
        streams = [
            asyncio.create_task(
                stream_chat(
                    client,
                    base_url,
                    model,
                    p,
                    max_tokens,
                    api_key,
                    stop=stop,
                    extra=extra,
                    timing=t,
                )
            )
            for p, t in zip(prompts, live, strict=True)
        ]
        # Every stream decoding for warmup_s (a baseline) before the long prompt arrives.
        while min(len(t.chunk_times_s) for t in live) < 2:
            if any(s.done() for s in streams):
                break  # one ended or failed already (its error is in its timing)
            await asyncio.sleep(0.05)
        await asyncio.sleep(warmup_s)
        long_start = time.perf_counter()
        long = await stream_chat(
            client,
            base_url,
            model,
            filler_prompt(long_prompt_words, 7777),
            1,
            api_key,
            extra=extra,
        )
        long_first = long.first_token_s or time.perf_counter()
        stop.set()
        timings = await asyncio.gather(*streams)
        last = max((len(t.chunk_times_s) for t in timings), default=0)
        control = await asyncio.gather(
            *(
                stream_chat(client, base_url, model, p, last + 1, api_key, extra=extra)
                for p in prompts
            )
        )
    # (stream, index of the gap's closing chunk) -> gap in ms, before and during the prefill
    before: dict[tuple[int, int], float] = {}
    during: dict[tuple[int, int], float] = {}
    for s, t in enumerate(timings):
        for j, (a, b) in enumerate(itertools.pairwise(t.chunk_times_s), start=1):
            if b < long_start:
                before[(s, j)] = (b - a) * 1000
            elif a < long_first:  # ends in the prefill, or spans its end
                during[(s, j)] = (b - a) * 1000
    ctrl = {
        (s, j): (b - a) * 1000
        for s, t in enumerate(control)
        for j, (a, b) in enumerate(itertools.pairwise(t.chunk_times_s), start=1)
    }
    matched = [k for k in during if k in ctrl]
    ctrl_sum, during_sum = sum(ctrl[k] for k in matched), sum(during[k] for k in matched)
    mean_before = sum(before.values()) / len(before) if before else None
    mean_during = sum(during.values()) / len(during) if during else None
    return InterferenceResult(
        num_streams=num_streams,
        long_prompt_tokens=long.prompt_tokens,
        long_ttft_s=long.ttft_s,
        gap_before_ms=percentile(list(before.values()), 50),
        gap_during_ms=percentile(list(during.values()), 50),
        max_gap_during_ms=max(during.values()) if during else None,
        control_gap_ms=ctrl_sum / len(matched) if matched else None,
        speed_kept=ctrl_sum / during_sum if during_sum else None,
        speed_kept_vs_before=mean_before / mean_during if mean_before and mean_during else None,
        gaps_during=len(matched),
    )
