"""Decode fairness during a long prefill, engine alone (no HTTP).

    python benchmarks/engine_fairness.py [--model DIR] [--streams 4] [--long-tokens 1062]
                                         [--share 0.3] [--smoke]

N greedy streams decode; after --baseline-tokens each, one long prompt arrives, and the
streams' inter-token gaps while it prefills (from its Started to its first token) are
compared with a control run of the same streams alone, token index by token index: a
stream's decode step gets slower as its context grows, so gaps from before the long prompt
would charge that growth to the prefill (both readings are printed). One JSON line with the
decode speed kept during the prefill (target: >= 70% at the default engine.prefill_share
0.3) and the long prompt's TTFT, which pays for it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import time
from pathlib import Path

from model_dirs import default_model_dir, tiny_model_dir

Gaps = dict[tuple[int, int], float]  # (stream, token index) -> inter-token gap in s


async def run_streams(
    pool, tag: str, streams: int, *, max_tokens: int | None, until=None
) -> tuple[Gaps, dict[tuple[int, int], str]]:
    """Greedy decode streams; each gap keyed by (stream, index), with the phase it fell in.

    `until(state, counts, tasks)`, when given, is awaited while the streams run; it sets
    state["phase"] as it goes, and the streams stop when it returns.
    """
    from omlx.engine.api import ChatMessage, GenerationRequest, RequestId, SamplingParams, Token

    gaps: Gaps = {}
    phases: dict[tuple[int, int], str] = {}
    state = {"phase": "before", "stop": False}
    counts = [0] * streams

    async def stream(i: int) -> None:
        req = GenerationRequest(
            request_id=RequestId(f"{tag}{i}"),
            model="m",
            max_tokens=max_tokens,
            messages=[ChatMessage("user", f"Story number {i}, please.")],
            sampling=SamplingParams(temperature=0),
        )
        last = None
        async for event in pool.generate(req):
            if not isinstance(event, Token):
                continue
            now = time.perf_counter()
            for _ in event.token_ids:
                if last is not None:
                    gaps[(i, counts[i])] = now - last
                    phases[(i, counts[i])] = state["phase"]
                counts[i] += 1
                last = now
            if state["stop"]:
                return

    tasks = [asyncio.create_task(stream(i)) for i in range(streams)]
    if until is not None:
        await until(state, counts, tasks)
        state["stop"] = True
    await asyncio.gather(*tasks)
    return gaps, phases


async def measure(
    model_dir: Path, streams: int, long_tokens: int, share: float, baseline_tokens: int
) -> dict[str, float]:
    from omlx.engine.api import GenerationRequest, RequestId, SamplingParams, Started, Token
    from omlx.pool.pool import LocalModelPool
    from omlx.settings import EngineSettings, Settings

    pool = LocalModelPool(
        Settings(engine=EngineSettings(prefill_share=share)), models={"m": model_dir}
    )
    times: dict[str, float] = {}

    async def long_prompt(state, counts, tasks) -> None:
        while min(counts) < baseline_tokens:
            for t in tasks:
                if t.done():
                    t.result()  # a stream failed: raise its error instead of waiting forever
            await asyncio.sleep(0.05)
        state["phase"] = "between"
        req = GenerationRequest(
            request_id=RequestId("long"),
            model="m",
            max_tokens=1,
            prompt_token_ids=[(7 * i) % 1000 + 100 for i in range(long_tokens)],
            sampling=SamplingParams(temperature=0),
        )
        times["submit"] = times["started"] = time.perf_counter()
        async for event in pool.generate(req):
            if isinstance(event, Started):
                times["started"], state["phase"] = time.perf_counter(), "prefill"
            elif isinstance(event, Token):
                times["first"] = time.perf_counter()
                state["phase"] = "after"

    try:
        await run_streams(pool, "warm", streams, max_tokens=8)
        gaps, phases = await run_streams(pool, "s", streams, max_tokens=None, until=long_prompt)
        # The control: the same streams (greedy, same prompts, so the same tokens and
        # contexts) without the long prompt. Decode slows as contexts grow, so the
        # prefill's cost is read against the same token indices, not the early ones.
        last_index = max(i for _, i in gaps)
        control, _ = await run_streams(pool, "c", streams, max_tokens=last_index + 1)
    finally:
        await pool.close(grace_s=0)
    during = [k for k, p in phases.items() if p == "prefill" and k in control]
    before = [k for k, p in phases.items() if p == "before" and k in control]
    d_gaps = [gaps[k] for k in during]
    mean_before = statistics.fmean(gaps[k] for k in before)
    mean_during = statistics.fmean(d_gaps)
    return {
        "itl_before_ms": round(1000 * mean_before, 2),
        "itl_during_prefill_ms": round(1000 * mean_during, 2),
        "itl_during_prefill_p50_ms": round(1000 * statistics.median(d_gaps), 2),
        "itl_during_prefill_p90_ms": round(1000 * statistics.quantiles(d_gaps, n=10)[-1], 2),
        "itl_control_same_tokens_ms": round(1000 * statistics.fmean(control[k] for k in during), 2),
        # decode speed = 1 / mean inter-token gap, against the control at the same tokens
        "decode_speed_kept_pct": round(100 * sum(control[k] for k in during) / sum(d_gaps), 1),
        # the naive reading, against the gaps before the long prompt (shorter contexts)
        "decode_speed_kept_vs_before_pct": round(100 * mean_before / mean_during, 1),
        # machine drift between the runs: control over treatment before the long prompt
        "control_drift_pct": round(
            100 * (sum(control[k] for k in before) / sum(gaps[k] for k in before) - 1), 1
        ),
        "long_prompt_ttft_s": round(times["first"] - times["submit"], 3),
        "long_prompt_prefill_s": round(times["first"] - times["started"], 3),
        "decode_tokens_during_prefill": len(during),
    }


def main() -> None:
    from omlx.platform.blas import reexec_with_blas

    reexec_with_blas()  # the BLAS `omlx serve` runs on (OMLX_BLAS=off: MLX's reference one)
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", type=Path, help="MLX model folder (default: the default model)")
    ap.add_argument("--streams", type=int, default=4)
    ap.add_argument("--long-tokens", type=int, default=1062)
    ap.add_argument("--share", type=float, default=0.3, help="engine.prefill_share")
    ap.add_argument("--baseline-tokens", type=int, default=20, help="tokens per stream alone")
    ap.add_argument("--smoke", action="store_true", help="tiny random model")
    args = ap.parse_args()
    if args.smoke:
        args.model = tiny_model_dir()
        args.long_tokens = 3000
    elif args.model is None:
        args.model = default_model_dir()
    result = asyncio.run(
        measure(args.model, args.streams, args.long_tokens, args.share, args.baseline_tokens)
    )
    sha = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    print(
        json.dumps(
            {
                "bench": "engine_fairness",
                "git": sha,
                "model": args.model.name,
                "streams": args.streams,
                "long_tokens": args.long_tokens,
                "prefill_share": args.share,
                **result,
            }
        )
    )


if __name__ == "__main__":
    main()
